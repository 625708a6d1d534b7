import dramatiq

from pipelines import chain
from pipelines.testing import embedded_app, running_worker


def fetch_image(url: str) -> str:
    return f"image of {url}"


def make_thumbnail(image: str) -> str:
    return f"thumbnail of {image}"


def test_thumbnails() -> None:
    with embedded_app() as app:
        fetch = dramatiq.actor(fetch_image, broker=app.broker)  # declare on app.broker
        thumbnail = dramatiq.actor(make_thumbnail, broker=app.broker)
        with running_worker(app):
            run = app.start(chain(fetch, thumbnail), args=("cat.png",))
            status = run.wait(timeout_s=10)
    assert status.state == "succeeded"
    assert run.result() == "thumbnail of image of cat.png"


if __name__ == "__main__":
    test_thumbnails()
