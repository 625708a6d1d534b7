import asyncio

import dramatiq

import pipelines
from pipelines import step

app = pipelines.configure()


@dramatiq.actor
def square(x: int) -> int:
    return x * x


async def handler(x: int) -> int:
    # In an asyncio web handler: none of these calls blocks the event loop.
    run = await app.start_async(step(square), args=(x,))
    return await run.result_async(timeout_s=10)


if __name__ == "__main__":
    from pipelines.testing import running_worker

    with running_worker(app):
        assert asyncio.run(handler(7)) == 49
