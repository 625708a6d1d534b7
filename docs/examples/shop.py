import dramatiq

import pipelines
from pipelines import chain, step

app = pipelines.configure()  # reads ./config.toml and PIPELINES_*


@dramatiq.actor
def add(x: int, y: int) -> int:
    return x + y


@dramatiq.actor
def double(x: int) -> int:
    return x * 2


app.register("sum_doubled", chain(step(add), step(double)))

if __name__ == "__main__":
    # No services needed: a worker in this process, on the embedded broker and store.
    from pipelines.testing import running_worker

    with running_worker(app):
        assert app.run("sum_doubled", x=2, y=3).result(timeout_s=10) == 10
