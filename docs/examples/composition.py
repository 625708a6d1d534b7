import dramatiq

import pipelines
from pipelines import chain, chord, fan_out, for_each, group, step

app = pipelines.configure()


@dramatiq.actor
def fetch(url: str) -> str:
    return f"image of {url}"


@dramatiq.actor
def thumbnail(size: int, image: str) -> str:
    return f"{size}px {image}"


@dramatiq.actor
def count(items: list[str]) -> int:
    return len(items)


@dramatiq.actor
def shout(text: str) -> str:
    return text.upper()


# chain: each result goes to the next step, appended to its arguments.
resize = chain(fetch, step(thumbnail, 256))
# fan-out: the same input to every branch, one publish; the result lists the branches' results.
both = fan_out(shout, step(thumbnail, 64))
# group: members with their own arguments, in parallel; the result is their results, in order.
sizes = group(step(thumbnail, size, "cat.png") for size in (64, 256))
# for_each: one call per item, in parallel.
loud = for_each(shout, ["a", "b", "c"])
# chord: parallel members, then one callback with every member's result, in member order.
counted = chord(group(step(thumbnail, size, "dog.png") for size in (64, 256, 1024)), then=count)

if __name__ == "__main__":
    from pipelines.testing import running_worker

    with running_worker(app):
        assert resize.run("cat.png").result(timeout_s=10) == "256px image of cat.png"
        assert both.run("hi").result(timeout_s=10) == ["HI", "64px hi"]
        assert sizes.run().result(timeout_s=10) == ["64px cat.png", "256px cat.png"]
        assert loud.run().result(timeout_s=10) == ["A", "B", "C"]
        assert counted.run().result(timeout_s=10) == 3
