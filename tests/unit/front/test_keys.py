"""The keys file: a bare key per line as ever, or a key followed by its client's settings;
every mistake a ConfigError that names the file and the line (and never shows a whole key);
whose request it is (`Keys.client_for`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.clients import Client, Priority
from inferd.errors import ConfigError, ErrorCode
from inferd.front.keys import Keys, parse_keys, read_keys


def test_bare_keys_keep_working_each_a_client_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "api.keys"
    path.write_text("# the team's keys\n\nfirst-key\n  second-key  \n")
    keys = read_keys(path)
    assert [k.token for k in keys] == [b"first-key", b"second-key"]
    assert [k.line for k in keys] == [3, 4]
    first, second = (k.client for k in keys)
    assert first.keyed and first.name.startswith("key:") and len(first.name) == 16
    assert "first" not in first.name and first.name != second.name
    assert first == Client(first.name, keyed=True)  # every setting its default


def test_settings_follow_the_key() -> None:
    (key,) = parse_keys(
        ["sk-alice  name=alice weight=2.5 priority=HIGH loads_per_minute=12 load_burst=4"], "f"
    )
    assert key.token == b"sk-alice"
    assert key.client == Client(
        "alice",
        weight=2.5,
        priority=Priority.HIGH,
        loads_per_minute=12.0,
        load_burst=4,
        keyed=True,
    )
    (low,) = parse_keys(["k priority=low loads_per_minute=0"], "f")
    assert low.client.priority is Priority.LOW and low.client.loads_per_minute == 0


def test_two_keys_of_one_client_share_it_and_a_repeated_line_is_harmless() -> None:
    keys = parse_keys(
        ["old name=alice weight=2", "new name=alice weight=2", "old name=alice weight=2"], "f"
    )
    assert [k.token for k in keys] == [b"old", b"new"]
    assert keys[0].client == keys[1].client


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            ["k weight"],
            "f, line 1: 'weight' is not a setting: after the key, settings are name=value",
        ),
        (["k colour=blue"], "f, line 1: unknown setting 'colour'; known: name, weight, priority"),
        (["k weight=0"], "f, line 1: weight=0: a weight is more than 0 and at most 1000"),
        (["k weight=nan"], "f, line 1: weight=nan: not a finite number"),
        (["k weight=two"], "f, line 1: weight=two: not a number"),
        (
            ["k priority=urgent"],
            "f, line 1: priority=urgent: a priority is one of low, normal, high",
        ),
        (["k loads_per_minute=-1"], "f, line 1: loads_per_minute=-1: at least 0 (0: no limit)"),
        (["k load_burst=0"], "f, line 1: load_burst=0: at least 1"),
        (["k load_burst=1.5"], "f, line 1: load_burst=1.5: not a whole number"),
        (["k name=a:b"], "f, line 1: name=a:b: a name is 1 to 64 letters, digits"),
        (["k name=anonymous"], "f, line 1: name=anonymous: 'anonymous' is reserved"),
        (["k weight=1 weight=2"], "f, line 1: 'weight' is given twice"),
        (
            ["# one", "k weight=1", "k weight=2"],
            "f, line 3: the same key as line 2, with other settings",
        ),
        (
            ["a name=team", "b name=team weight=3"],
            "f, line 2: client 'team' is named on line 1 with other settings",
        ),
    ],
)
def test_a_wrong_line_is_a_config_error_naming_the_line(lines: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_keys(lines, "f")
    assert str(caught.value).startswith(message), str(caught.value)


def test_a_message_never_shows_a_long_key_whole() -> None:
    secret = "sk-" + "x" * 60
    with pytest.raises(ConfigError) as caught:
        parse_keys([f"k {secret}"], "f")
    assert secret not in str(caught.value)


def test_a_file_without_keys_or_unreadable_is_a_config_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.keys"
    empty.write_text("# nothing yet\n\n")
    with pytest.raises(ConfigError, match=r"empty\.keys: the key file holds no key"):
        read_keys(empty)
    with pytest.raises(ConfigError, match="cannot read the key file"):
        read_keys(tmp_path / "missing.keys")
    binary = tmp_path / "binary.keys"
    binary.write_bytes(b"\xff\xfe\x00key\n")
    with pytest.raises(ConfigError, match="cannot read the key file"):
        read_keys(binary)
    assert read_keys(None) == ()


def test_client_for_is_the_keys_client_else_the_address() -> None:
    api = parse_keys(["ka name=alice weight=2", "kb name=bob"], "api")
    admin = parse_keys(["adm name=ops"], "admin")
    keys = Keys(api, admin)
    assert keys.client_for(b"ka", "10.0.0.1").name == "alice"
    assert keys.client_for(b"kb", None).name == "bob"
    # not a valid API key (refused 4010 anyway): the address's
    assert keys.client_for(b"nope", "10.0.0.1").name == "addr:10.0.0.1"
    assert keys.client_for(None, "10.0.0.1").name == "addr:10.0.0.1"
    assert keys.client_for(b"adm", "10.0.0.2").name == "addr:10.0.0.2"
    # without API keys every client is its address
    assert Keys((), admin).client_for(b"ka", "::1").name == "addr:::1"


def test_the_rule_is_the_same_with_settings_on_the_lines() -> None:
    keys = Keys(parse_keys(["ka name=alice"], "api"), parse_keys(["adm"], "admin"))
    assert keys.refusal(False, b"ka") is None
    refused = keys.refusal(False, b"kb")
    assert refused is not None and refused.code is ErrorCode.UNAUTHORIZED
    assert keys.refusal(True, b"adm") is None
    refused = keys.refusal(True, b"ka")
    assert refused is not None and refused.code is ErrorCode.UNAUTHORIZED
    refused = Keys((), ()).refusal(True, b"adm")
    assert refused is not None and refused.code is ErrorCode.FORBIDDEN
