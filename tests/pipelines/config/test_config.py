"""Loading config.toml and PIPELINES_* variables, errors that name the key, and masking of credentials."""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

import pytest
from redis.connection import SSLConnection
from redis.sentinel import SentinelManagedConnection

from pipelines.config.masking import mask_text, mask_url
from pipelines.config.redis_urls import SentinelAddress, parse_sentinel_url
from pipelines.config.settings import CONFIG_PATH_ENV, Settings, load_settings
from pipelines.errors import ConfigError
from pipelines.store.redis_sentinel import sentinel_primary

SECRET = "s3cr3t-Pa55"


@pytest.fixture(autouse=True)
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run every test in an empty directory with no PIPELINES_* variable set."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("PIPELINES_"):
            monkeypatch.delenv(name)


def write_config(text: str, name: str = "config.toml") -> Path:
    path = Path(name)
    path.write_text(text)
    return path


def test_defaults_load_when_there_is_no_config_file() -> None:
    settings = load_settings()
    assert settings.namespace == "pipelines"
    assert settings.broker.url == "amqp://guest:guest@127.0.0.1:5672/%2F"
    assert settings.broker.queue_type == "quorum"
    assert settings.broker.delivery_limit == 20
    assert settings.broker.delay_tiers_s == (0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0, 1800.0, 7200.0, 21600.0)
    assert settings.store.url == "redis://127.0.0.1:6379/0"
    assert settings.retries.max_retries == 5
    assert settings == Settings()


def test_the_config_file_in_the_working_directory_is_read() -> None:
    write_config('namespace = "staging"\n[broker]\nqueue_type = "classic"\nprefetch = 8\n')
    settings = load_settings()
    assert settings.namespace == "staging"
    assert settings.broker.queue_type == "classic"
    assert settings.broker.prefetch == 8
    assert settings.broker.delivery_limit == 20


def test_an_explicit_path_is_read() -> None:
    path = write_config('namespace = "explicit"\n', "elsewhere.toml")
    assert load_settings(path).namespace == "explicit"
    assert load_settings(str(path)).namespace == "explicit"


def test_pipelines_config_names_the_file_to_read(monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config('namespace = "from-env-file"\n', "env.toml")
    monkeypatch.setenv(CONFIG_PATH_ENV, str(path))
    assert load_settings().namespace == "from-env-file"


def test_a_missing_explicit_file_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml does not exist"):
        load_settings("nope.toml")


def test_a_missing_file_named_by_pipelines_config_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_PATH_ENV, "missing.toml")
    with pytest.raises(ConfigError, match=rf"missing\.toml does not exist.*{CONFIG_PATH_ENV}"):
        load_settings()


def test_invalid_toml_is_a_config_error() -> None:
    write_config("namespace = \n[broker\n")
    with pytest.raises(ConfigError, match=r"config\.toml is not valid TOML"):
        load_settings()


def test_environment_variables_override_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    write_config('namespace = "file"\n[broker]\nurl = "amqp://file-host/"\nprefetch = 3\n')
    monkeypatch.setenv("PIPELINES_BROKER__URL", "amqps://env-host:5671/")
    monkeypatch.setenv("PIPELINES_NAMESPACE", "env")
    settings = load_settings()
    assert settings.broker.url == "amqps://env-host:5671/"
    assert settings.namespace == "env"
    assert settings.broker.prefetch == 3


@pytest.mark.parametrize(
    ("variable", "value", "key", "expected"),
    [
        ("PIPELINES_BROKER__DELAY_TIERS_S", "[0.5, 2, 60]", "broker.delay_tiers_s", (0.5, 2.0, 60.0)),
        ("PIPELINES_STORE__RETENTION_S", "3600", "store.retention_s", 3600),
        ("PIPELINES_BROKER__CONFIRM_DELIVERY", "false", "broker.confirm_delivery", False),
        ("PIPELINES_METRICS__PORT", "9000", "metrics.port", 9000),
        ("PIPELINES_BROKER__TLS__SERVER_HOSTNAME", "rabbit.internal", "broker.tls.server_hostname", "rabbit.internal"),
    ],
)
def test_environment_values_are_parsed_like_the_file(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, key: str, expected: object
) -> None:
    monkeypatch.setenv(variable, value)
    assert functools.reduce(getattr, key.split("."), load_settings()) == expected


@pytest.mark.parametrize(
    ("toml", "key", "value", "variable"),
    [
        ('namespace = "Prod.EU"\n', "namespace", "'Prod.EU'", "PIPELINES_NAMESPACE"),
        ("[broker]\nheartbeat_s = 9999\n", "broker.heartbeat_s", "9999", "PIPELINES_BROKER__HEARTBEAT_S"),
        ('[broker]\nqueue_type = "lazy"\n', "broker.queue_type", "'lazy'", "PIPELINES_BROKER__QUEUE_TYPE"),
        (
            "[broker]\ndelay_tiers_s = [5.0, 1.0]\n",
            "broker.delay_tiers_s",
            "[5.0, 1.0]",
            "PIPELINES_BROKER__DELAY_TIERS_S",
        ),
        ("[broker]\ndelay_tiers_s = []\n", "broker.delay_tiers_s", "[]", "PIPELINES_BROKER__DELAY_TIERS_S"),
        ('[store]\nurl = "http://cache/0"\n', "store.url", "'http://cache/0'", "PIPELINES_STORE__URL"),
        ('[store]\nurl = "redis+cluster://cache"\n', "store.url", "'redis+cluster://cache'", "PIPELINES_STORE__URL"),
        (
            '[store]\nurl = "redis+cluster://c:7000/3"\n',
            "store.url",
            "'redis+cluster://c:7000/3'",
            "PIPELINES_STORE__URL",
        ),
        (
            '[store]\nurl = "redis+sentinel://s1:26379,s2:26379"\n',
            "store.url",
            "'redis+sentinel://s1:26379,s2:26379'",
            "PIPELINES_STORE__URL",
        ),
        (
            '[store]\nurl = "redis+sentinel://s1:26379/main/zero"\n',
            "store.url",
            "'redis+sentinel://s1:26379/main/zero'",
            "PIPELINES_STORE__URL",
        ),
        (
            '[store]\nurl = "redis+sentinel://s1/main"\n',
            "store.url",
            "'redis+sentinel://s1/main'",
            "PIPELINES_STORE__URL",
        ),
        ("[store]\nwait_for_replicas = -1\n", "store.wait_for_replicas", "-1", "PIPELINES_STORE__WAIT_FOR_REPLICAS"),
        ("[metrics]\nport = 0\n", "metrics.port", "0", "PIPELINES_METRICS__PORT"),
        ("[broker.tls]\nca_file = 5\n", "broker.tls.ca_file", "5", "PIPELINES_BROKER__TLS__CA_FILE"),
    ],
)
def test_an_invalid_file_value_names_the_key_the_value_and_the_variable(
    toml: str, key: str, value: str, variable: str
) -> None:
    write_config(toml)
    with pytest.raises(ConfigError) as raised:
        load_settings()
    text = str(raised.value)
    assert f"{key} = {value}" in text
    assert variable in text
    assert "config.toml" in text


def test_an_invalid_environment_value_names_the_key_the_value_and_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PIPELINES_BROKER__HEARTBEAT_S", "-1")
    with pytest.raises(ConfigError, match=r"broker\.heartbeat_s = '-1' .*PIPELINES_BROKER__HEARTBEAT_S"):
        load_settings()


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('namespce = "x"\n', "namespce"),
        ("[brokers]\nurl = 'amqp://h/'\n", "brokers"),
        ("[broker]\nurll = 'amqp://h/'\n", "broker.urll"),
        ("[broker.tls]\nca = 'x'\n", "broker.tls.ca"),
    ],
)
def test_unknown_keys_in_the_file_are_rejected_by_name(toml: str, key: str) -> None:
    write_config(toml)
    with pytest.raises(ConfigError, match=rf"unknown key '{key}'"):
        load_settings()


def test_unknown_environment_keys_are_rejected_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINES_BROKER__URLX", "amqp://h/")
    with pytest.raises(ConfigError, match=r"unknown key 'broker\.urlx'.*PIPELINES_BROKER__URLX"):
        load_settings()


@pytest.mark.parametrize("name", ["PIPELINES_BROKR__URL", "PIPELINES_NAMESPACE__URL"])
def test_a_variable_for_a_section_that_does_not_exist_is_rejected_by_name(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, "amqp://h/")
    with pytest.raises(ConfigError, match=rf"{name} names no section .*Sections are app, broker,"):
        load_settings()


def test_variables_outside_the_settings_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINES_TEST_AMQP_URL", "amqp://h/")
    assert load_settings().broker.url != "amqp://h/"


def test_a_list_value_in_the_environment_that_is_not_json_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINES_BROKER__DELAY_TIERS_S", "1,5,30")
    with pytest.raises(ConfigError, match="PIPELINES_BROKER__DELAY_TIERS_S"):
        load_settings()


@pytest.mark.parametrize(
    ("toml", "masked"),
    [
        (f'[broker]\nurl = "http://admin:{SECRET}@rabbit:5672/"\n', "'http://admin:***@rabbit:5672/'"),
        (f'[store]\nurl = "https://:{SECRET}@cache/0"\n', "'https://:***@cache/0'"),
    ],
)
def test_an_invalid_url_is_reported_without_its_password(toml: str, masked: str) -> None:
    write_config(toml)
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert SECRET not in str(raised.value)
    assert masked in str(raised.value)


def test_an_invalid_url_from_the_environment_is_reported_without_its_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINES_STORE__URL", f"mysql://root:{SECRET}@db/0")
    with pytest.raises(ConfigError, match=r"store\.url = 'mysql://root:\*\*\*@db/0'") as raised:
        load_settings()
    assert SECRET not in str(raised.value)


def test_masked_settings_hide_every_url_password() -> None:
    write_config(
        f'[broker]\nurl = "amqps://admin:{SECRET}@rabbit:5671/%2F"\n[store]\nurl = "rediss://:{SECRET}x@cache:6380/1"\n'
    )
    settings = load_settings()
    masked = settings.masked()
    assert SECRET not in json.dumps(masked)
    assert masked["broker"]["url"] == "amqps://admin:***@rabbit:5671/%2F"
    assert masked["store"]["url"] == "rediss://:***@cache:6380/1"
    assert settings.broker.url == f"amqps://admin:{SECRET}@rabbit:5671/%2F"


def test_masked_settings_keep_every_other_value() -> None:
    settings = load_settings()
    masked = settings.masked()
    plain = settings.model_dump(mode="json")
    assert masked["broker"].pop("url") == "amqp://guest:***@127.0.0.1:5672/%2F"
    assert plain["broker"].pop("url") == "amqp://guest:guest@127.0.0.1:5672/%2F"
    assert masked == plain
    assert json.loads(json.dumps(masked)) == masked


@pytest.mark.parametrize(
    "url", ["amqp://guest@rabbit/", "memory://", "redis://127.0.0.1:6379/0", "amqp://rabbit:5672/%2F?heartbeat=5"]
)
def test_a_url_without_a_password_is_not_changed_by_masking(url: str) -> None:
    assert mask_url(url) == url


def test_masked_settings_hide_a_password_in_the_telemetry_endpoint() -> None:
    write_config(f'[telemetry]\nendpoint = "https://otel:{SECRET}@collector:4318"\n')
    assert SECRET not in json.dumps(load_settings().masked())


def test_a_section_of_the_wrong_type_is_reported_without_a_password() -> None:
    write_config(f'broker = ["amqp://admin:{SECRET}@rabbit/"]\n')
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert SECRET not in str(raised.value)


@pytest.mark.parametrize(
    "toml",
    [
        f'[broker]\nurl = "http://admin:{SECRET}@rabbit:56x2/"\n',
        f'[store]\nurl = "redis://admin:{SECRET}@cache:63x9/0"\n',
    ],
    ids=["http-url-for-broker", "redis-url-for-store"],
)
def test_a_url_with_a_non_numeric_port_gives_a_config_error_or_masked_settings(toml: str) -> None:
    write_config(toml)
    try:
        shown = json.dumps(load_settings().masked())
    except ConfigError as e:
        shown = str(e)
    assert SECRET not in shown


@pytest.mark.parametrize(
    ("variable", "url", "password", "expected"),
    [
        ("PIPELINES_BROKER__URL", "amqp//guest:{}@rabbit:5672/%2F", SECRET, "broker.url = 'amqp//guest:***@rabbit"),
        ("PIPELINES_STORE__URL", "redis//:{}@cache/0", SECRET, "store.url = 'redis//:***@cache/0'"),
        ("PIPELINES_STORE__URL", "redis//u:{}@cache/0", "pa/ss", "store.url = 'redis//u:***@cache/0'"),
        ("PIPELINES_BROKER__URL", "amqp//guest:{}@rabbit/%2F", "my/secret", "broker.url = 'amqp//guest:***@rabbit/"),
        ("PIPELINES_STORE__URL", "redis//u:{}@cache/0", "it's", "store.url = 'redis//u:***@cache/0'"),
        ("PIPELINES_STORE__URL", "redis//u:{}@cache/0", "two words", "store.url = 'redis//u:***@cache/0'"),
        ("PIPELINES_STORE__URL", "redis//u:{}@cache/0", "b64+/a=@x", "store.url = 'redis//u:***@cache/0'"),
        ("PIPELINES_STORE__URL", "redis:/u:{}@cache/0", "pa/ss w'rd", "store.url = 'redis:/u:***@cache/0'"),
        ("PIPELINES_STORE__URL", "redis:u:{}@cache/0", "pa/ss", "store.url = 'redis:***@cache/0'"),
        ("PIPELINES_STORE__URL", "u:{}@cache/0", "two words", "store.url = 'u:***@cache/0'"),
    ],
    ids=[
        "broker-scheme-typo",
        "store-scheme-typo",
        "slash",
        "broker-slash",
        "quote",
        "space",
        "at-sign",
        "one-slash-lost",
        "both-slashes-lost",
        "no-scheme",
    ],
)
def test_a_url_with_a_typo_in_its_scheme_is_reported_without_its_password(
    monkeypatch: pytest.MonkeyPatch, variable: str, url: str, password: str, expected: str
) -> None:
    """Even a password with '/', a quote, a space or '@' in it: from the ':' after the user name to the
    last '@' is masked, whether or not the scheme reads ``://``."""
    monkeypatch.setenv(variable, url.format(password))
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert password not in str(raised.value)
    assert expected in str(raised.value)


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("cannot reach redis//u:two words@cache/0 now", "cannot reach redis//u:***@cache/0 now"),
        ("amqp//guest:my/secret@rabbit/ and redis//u:it's@cache/0", "amqp//guest:***@rabbit/ and redis//u:***@cache/0"),
        ("url = 'redis:/u:pa/ss@cache/0'", "url = 'redis:/u:***@cache/0'"),
        ("u:pa/ss@cache/0", "u:***@cache/0"),
        ("at 12:30 bob@example.com wrote", "at 12:30 bob@example.com wrote"),
    ],
    ids=["space", "two-urls", "one-slash-lost", "no-scheme", "prose"],
)
def test_a_password_after_a_mistyped_scheme_is_masked_in_free_text(text: str, masked: str) -> None:
    assert mask_text(text) == masked


@pytest.mark.parametrize(
    ("variable", "url", "expected"),
    [
        ("PIPELINES_BROKER__URL", f"amqp://guest:{SECRET}@rabbit/%2F?heartbeat=abc", "Invalid heartbeat value 'abc'"),
        ("PIPELINES_BROKER__URL", "amqp://rabbit/%2F?bogus=1", "Unknown URL parameter: 'bogus'"),
        ("PIPELINES_STORE__URL", "redis://cache:6379/notadb", "the database as a number"),
        ("PIPELINES_STORE__URL", f"redis://:{SECRET}@cache/0?socket_timeout=abc", "'socket_timeout'"),
        ("PIPELINES_STORE__URL", "redis://cache/0?bogus=1", "'bogus'"),
    ],
    ids=["amqp-bad-heartbeat", "amqp-unknown-parameter", "redis-db-not-a-number", "redis-bad-timeout", "redis-unknown"],
)
def test_a_url_the_client_library_would_refuse_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, variable: str, url: str, expected: str
) -> None:
    monkeypatch.setenv(variable, url)
    with pytest.raises(ConfigError, match=variable) as raised:
        load_settings()
    assert expected in str(raised.value)
    assert SECRET not in str(raised.value)


def test_with_overrides_returns_a_validated_copy() -> None:
    settings = load_settings()
    changed = settings.with_overrides(broker={"prefetch": 16, "queue_type": "classic"})
    assert changed.broker.prefetch == 16
    assert changed.broker.queue_type == "classic"
    assert changed.broker.url == settings.broker.url
    assert changed.store == settings.store
    assert settings.broker.prefetch == 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"broker": {"prefetch": -1}}, r"broker\.prefetch = -1 \(from overrides"),
        ({"broker": {"nope": 1}}, r"unknown key 'broker\.nope'"),
        ({"store": {"url": f"ftp://u:{SECRET}@h/"}}, r"store\.url = 'ftp://u:\*\*\*@h/'"),
    ],
)
def test_with_overrides_rejects_invalid_values(overrides: dict[str, dict[str, object]], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        Settings().with_overrides(**overrides)
    assert SECRET not in str(raised.value)


def test_with_overrides_does_not_read_the_environment_again(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings()
    monkeypatch.setenv("PIPELINES_BROKER__PREFETCH", "99")
    monkeypatch.setenv("PIPELINES_NAMESPACE", "from-env")
    changed = settings.with_overrides(broker={"queue_type": "classic"})
    assert changed.broker.prefetch == 0
    assert changed.namespace == "pipelines"


def test_a_password_in_a_redis_url_query_is_masked_too() -> None:
    assert mask_url(f"redis://cache:6379/0?password={SECRET}&db=1") == "redis://cache:6379/0?password=***&db=1"


NODES = [f"amqp://admin:{SECRET}@rabbit-{k}:5672/%2F" for k in (1, 2, 3)]


@pytest.mark.parametrize(
    "toml",
    [
        f'[broker]\nurl = "{",".join(NODES)}"\n',
        f'[broker]\nurl = "{", ".join(NODES)}"\n',
        f"[broker]\nurls = {NODES}\n",
    ],
    ids=["comma-separated-url", "comma-and-space-separated-url", "urls-list"],
)
def test_a_cluster_is_named_by_a_comma_separated_url_or_a_list_of_urls(toml: str) -> None:
    write_config(toml.replace("'", '"'))
    settings = load_settings()
    assert settings.broker.node_urls == tuple(NODES)
    assert settings.broker.masked_url == ", ".join(url.replace(SECRET, "***") for url in NODES)
    assert SECRET not in json.dumps(settings.masked())
    assert not settings.broker.is_memory


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (f'[broker]\nurl = "{NODES[0]}"\nurls = ["{NODES[1]}"]\n', "either broker.url or broker.urls"),
        (f'[broker]\nurl = "{NODES[0]},,{NODES[1]}"\n', "none of them empty"),
        (f'[broker]\nurl = "{NODES[0]},memory://"\n', "cannot be one of several"),
        (f'[broker]\nurls = ["{NODES[0]}", "memory://"]\n', "one amqp:// or amqps:// URL per entry"),
        (f'[broker]\nurl = "{NODES[0]},redis://:{SECRET}@cache/0"\n', "amqp://"),
    ],
    ids=["url-and-urls", "empty-entry", "memory-in-url", "memory-in-urls", "wrong-scheme"],
)
def test_a_bad_list_of_nodes_is_a_config_error_without_passwords(toml: str, message: str) -> None:
    write_config(toml)
    with pytest.raises(ConfigError, match=message) as raised:
        load_settings()
    assert SECRET not in str(raised.value)


def test_the_quorum_replication_factor_is_unset_unless_configured() -> None:
    assert load_settings().broker.quorum_initial_group_size is None
    write_config("[broker]\nquorum_initial_group_size = 3\n")
    assert load_settings().broker.quorum_initial_group_size == 3
    write_config("[broker]\nquorum_initial_group_size = 0\n")
    with pytest.raises(ConfigError, match="quorum_initial_group_size"):
        load_settings()


def test_a_comma_separated_list_of_urls_is_masked_url_by_url() -> None:
    assert mask_url(",".join(NODES)) == ",".join(url.replace(SECRET, "***") for url in NODES)


def test_a_sentinel_url_names_the_sentinels_the_primary_and_the_database() -> None:
    address = parse_sentinel_url("rediss+sentinel://app:s%40cret@s1:26379,s2:26380/orders/2")
    assert address == SentinelAddress(
        sentinels=(("s1", 26379), ("s2", 26380)),
        primary="orders",
        database=2,
        username="app",
        password="s@cret",
        tls=True,
    )
    assert parse_sentinel_url("redis+sentinel://s1:26379/orders").database == 0
    write_config('[store]\nurl = "redis+sentinel://s1:26379,s2:26379/orders/0"\n')
    assert load_settings().store.url == "redis+sentinel://s1:26379,s2:26379/orders/0"


@pytest.mark.parametrize(
    ("url", "tls"), [("redis+sentinel://s1:26379/orders", False), ("rediss+sentinel://s1:26379/orders", True)]
)
def test_a_sentinel_primarys_connections_ask_the_sentinels_again_and_use_tls_as_the_scheme_says(
    url: str, tls: bool
) -> None:
    client = sentinel_primary(url, timeout_s=1)  # nothing connects yet
    connection_class = client.connection_pool.connection_class

    assert issubclass(connection_class, SentinelManagedConnection)
    assert issubclass(connection_class, SSLConnection) is tls
    # A lost connection reconnects through connect(), which asks the sentinels, not to its old address.
    assert connection_class.send_packed_command is not SentinelManagedConnection.send_packed_command
    client.close()


def test_a_console_token_shorter_than_sixteen_characters_is_refused_without_showing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PIPELINES_UI__TOKEN", "letmein123")
    with pytest.raises(ConfigError, match=r"ui\.token .*at least 16 characters") as raised:
        load_settings()
    monkeypatch.setenv("PIPELINES_UI__TOKEN", "0123456789abcdef")

    assert load_settings().ui.token == "0123456789abcdef"
    assert "letmein123" not in str(raised.value)


@pytest.mark.parametrize(
    ("store", "says"),
    [
        (
            {"url": "postgresql://app@bouncer:6432/app", "postgres_pooled": True},
            "set store.postgres_listen_url to a direct URL of the primary",
        ),
        (
            {"url": "redis://127.0.0.1:6379/0", "postgres_listen_url": "postgresql://app@db/app"},
            "for a PostgreSQL store only",
        ),
        (
            {"url": "postgresql://app@bouncer:6432/app", "postgres_listen_url": "redis://db/0"},
            "is a postgresql:// URL",
        ),
    ],
)
def test_a_pooled_postgresql_store_needs_a_direct_url_to_listen_on(store: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        Settings.from_values({"store": store})


def test_a_postgresql_store_url_may_name_several_hosts_as_libpq_does_and_hides_its_password() -> None:
    url = f"postgresql://app:{SECRET}@db1:5432,db2:5433/app?target_session_attrs=read-write"
    settings = Settings.from_values({"store": {"url": url, "postgres_listen_url": url}})
    assert settings.store.url == url
    shown = json.dumps(settings.masked())
    assert SECRET not in shown
    assert "postgresql://app:***@db1:5432,db2:5433/app?target_session_attrs=read-write" in shown


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (f"postgresql://app:{SECRET}@db1:5432,db2:54x3/app", "port is a number"),
        (f"postgresql://app:{SECRET}@db1:5432,,db2/app", "hosts separated by single commas"),
    ],
    ids=["a-port-not-a-number", "an-empty-host"],
)
def test_a_postgresql_url_with_a_bad_host_in_its_list_is_a_config_error_without_its_password(
    url: str, says: str
) -> None:
    with pytest.raises(ConfigError, match=says) as raised:
        Settings.from_values({"store": {"url": url}})
    assert SECRET not in str(raised.value)
