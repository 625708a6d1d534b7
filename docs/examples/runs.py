import dramatiq

import pipelines
from pipelines import chain, step

app = pipelines.configure()


@dramatiq.actor
def charge(order_id: int) -> float:
    return 19.5


@dramatiq.actor
def receipt(total: float) -> str:
    return f"paid {total}"


pipeline = chain(step(charge), step(receipt))

if __name__ == "__main__":
    from pipelines.testing import running_worker

    with running_worker(app):
        run = app.start(pipeline, args=(42,), idempotency_key="order-42")
        again = app.start(pipeline, args=(42,), idempotency_key="order-42")
        assert again.id == run.id  # the same key returns the same run
        assert not again.created

        status = run.wait(timeout_s=10)  # succeeded, failed or cancelled
        assert status.state == "succeeded"
        assert run.result(timeout_s=10) == "paid 19.5"

        page = app.runs(state="succeeded", since="2h", limit=50)
        assert [summary.run_id for summary in page.runs] == [run.id]
        assert app.runs(key="order-42").runs[0].run_id == run.id
