from typing import Any

import dramatiq
from pydantic import BaseModel

import pipelines

app = pipelines.configure()


class Charge(BaseModel):
    order_id: int
    total: float
    currency: str


def charge_v1_to_v2(fields: dict[str, Any]) -> dict[str, Any]:
    return {**fields, "currency": "EUR"}  # version 1 had no currency


@dramatiq.actor(payload=Charge, schema_version=2, upgrades={1: charge_v1_to_v2})
def charge(payment: Charge) -> str:
    return f"{payment.total} {payment.currency}"


if __name__ == "__main__":
    from pipelines.payloads.typed import InvalidPayload
    from pipelines.testing import running_worker

    try:
        charge.send({"order_id": "seven", "total": 19.5, "currency": "EUR"})
    except InvalidPayload as e:
        print(e)  # the caller hears at once, with pydantic's errors
    else:
        raise AssertionError("a payload that does not validate is refused when sent")
    with running_worker(app):
        charge.send(Charge(order_id=7, total=19.5, currency="USD"))
        app.broker.join(charge.queue_name)
