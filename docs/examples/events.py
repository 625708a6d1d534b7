import dramatiq
from pydantic import BaseModel

import pipelines

app = pipelines.configure()
seen: list[int] = []


class OrderPlaced(BaseModel):
    order_id: int
    total: float


@dramatiq.actor(subscribe=["order.*"], payload=OrderPlaced)
def start_fulfilment(order: OrderPlaced) -> None:
    seen.append(order.order_id)


if __name__ == "__main__":
    from pipelines.errors import Unroutable
    from pipelines.testing import running_worker

    with running_worker(app):
        pipelines.publish("order.placed", {"order_id": 7, "total": 19.5})
        app.broker.join(start_fulfilment.queue_name)
    assert seen == [7]
    try:
        pipelines.publish("invoice.sent", {"invoice_id": 1})
    except Unroutable as e:
        print(e)  # nobody subscribes: the publisher hears of it
    else:
        raise AssertionError("an event nobody subscribes to is refused")
