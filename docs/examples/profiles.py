import dramatiq
from periodiq import cron

import pipelines
from pipelines import step

app = pipelines.configure()


@dramatiq.actor(profile="fire_and_forget")
def send_welcome_email(user_id: int) -> None: ...


@dramatiq.actor(profile="guaranteed", idempotency_key=lambda order_id, **_: f"charge-{order_id}")
def charge_payment(order_id: int, total: float) -> None: ...


@dramatiq.actor(profile="ordered", ordering_key="user_id", partitions=8)  # a parameter name, or a function
def record_timeline_event(user_id: int, event: str) -> None: ...


@dramatiq.actor(periodic=cron("0 2 * * *"), missed="catch_up")  # profile "scheduled"
def nightly_report() -> None: ...


@dramatiq.actor(profile="long_running", lease_s=60, on_lost="retry", timeout_s=4 * 3600)
def export_orders(month: str, chunks: int = 10) -> str:
    for done in range(chunks):
        pipelines.report_progress(done / chunks, f"{done}/{chunks} chunks")  # raises Cancelled after a cancel
    return f"exports/{month}.csv"


if __name__ == "__main__":
    from pipelines.testing import running_worker

    with running_worker(app):
        run = app.start(step(export_orders, "2026-11"))  # a run, to follow and cancel it
        assert run.result(timeout_s=10) == "exports/2026-11.csv"
