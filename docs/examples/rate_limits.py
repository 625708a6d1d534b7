import time

import dramatiq

import pipelines

app = pipelines.configure()
ran: list[float] = []


@dramatiq.actor(rate_limit="20/s")
def call_partner_api(n: int) -> None:
    ran.append(time.monotonic())


if __name__ == "__main__":
    from pipelines.testing import running_worker

    with running_worker(app):
        for n in range(30):
            call_partner_api.send(n)
        deadline = time.monotonic() + 10
        while len(ran) < 30 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(ran) == 30
    busiest = max(sum(1 for t in ran if start <= t < start + 1) for start in ran)
    assert busiest <= 21, busiest  # 20 a second, and one for the few ms between a slot and the start
