"""The store contract stays whole: every role method is called by its tests, every script has its decoder."""

from __future__ import annotations

import inspect
from importlib import resources
from pathlib import Path

from pipelines.store import redis, redis_records, redis_workers, replies, roles, stall_checks

HERE = Path(__file__).parent
ROLES = [
    role
    for name, role in vars(roles).items()
    if inspect.isclass(role) and role.__module__.startswith(f"{roles.__name__}.") and name != "RunStore"
]


def test_every_method_of_every_role_is_called_directly_by_the_contract_tests() -> None:
    tests = "\n".join(path.read_text() for path in HERE.glob("test_*.py"))
    methods = {name for role in ROLES for name in vars(role) if not name.startswith("_") and callable(vars(role)[name])}

    assert len(methods) == 51
    assert sorted(name for name in methods if f"store.{name}(" not in tests) == []


def test_every_script_has_one_decoder_that_the_redis_store_uses() -> None:
    scripts = sorted(path.name[: -len(".lua")] for path in resources.files("pipelines.store").joinpath("lua").iterdir())
    modules = (redis, redis_records, redis_workers, stall_checks)
    source = "".join(inspect.getsource(module) for module in modules)

    assert [name for name in scripts if not inspect.isfunction(getattr(replies, name, None))] == []
    assert [name for name in scripts if f"replies.{name}(" not in source] == []
    assert [name for name in scripts if f'scripts.register("{name}")' not in source] == []
