import dramatiq

import pipelines

app = pipelines.configure()


class CardDeclined(Exception):
    """A permanent failure: retrying cannot help."""


@dramatiq.actor(max_retries=3, min_backoff=100, max_backoff=1000, throws=(CardDeclined,))
def charge(order_id: int) -> None:
    raise CardDeclined(f"order {order_id}: the card was declined")


if __name__ == "__main__":
    import time

    from pipelines.testing import running_worker

    with running_worker(app):
        charge.send(7)
        app.broker.join(charge.queue_name)
        deadline = time.monotonic() + 10
        while not (letters := app.dead_letters.list()) and time.monotonic() < deadline:
            time.sleep(0.05)
    [letter] = letters
    assert letter.reason.reason == "permanent error", letter.reason
    assert letter.reason.error_type == "CardDeclined"
    assert app.dead_letters.show(letter.id).reason.attempts == 1  # never retried
