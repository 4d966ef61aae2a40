from __future__ import annotations

from pathlib import Path

import pytest

from inferd.config.server_settings import ServerSettings, load_server_settings
from inferd.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inferd.yaml"
    path.write_text(text)
    return path


def test_defaults_when_nothing_is_given() -> None:
    settings = load_server_settings(None, {}, {})
    assert settings == ServerSettings()
    assert settings.port == 8000


def test_precedence_is_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    path = write(tmp_path, "port: 9001\nhost: 0.0.0.0\ndrain_timeout_s: 5\nlog_level: debug\n")
    env = {"INFERD_PORT": "9002", "INFERD_DRAIN_TIMEOUT_S": "7"}
    flags = {"port": "9003", "host": None}
    settings = load_server_settings(path, env, flags)
    assert settings.port == 9003  # flag
    assert settings.drain_timeout_s == 7  # env over file
    assert settings.host == "0.0.0.0"  # file (flag not given)
    assert settings.log_level == "debug"  # file
    assert settings.request_timeout_s == ServerSettings().request_timeout_s  # default


def test_unknown_key_in_file_names_the_file_and_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, "port: 9001\nmax_body_byte: 10\n")
    with pytest.raises(ConfigError) as info:
        load_server_settings(path, {}, {})
    assert str(path) in str(info.value)
    assert "unknown key 'max_body_byte'" in str(info.value)


def test_wrong_type_in_file_names_the_file_and_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, "port: eighty\n")
    with pytest.raises(ConfigError) as info:
        load_server_settings(path, {}, {})
    assert str(path) in str(info.value) and "'port'" in str(info.value)


def test_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        load_server_settings(None, {"INFERD_PORT": "-3"}, {})
    assert "$INFERD_PORT" in str(info.value)


def test_file_that_is_not_a_mapping_or_not_yaml_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mapping"):
        load_server_settings(write(tmp_path, "- 1\n- 2\n"), {}, {})
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_server_settings(write(tmp_path, "port: [1\n"), {}, {})
    with pytest.raises(ConfigError, match="cannot read"):
        load_server_settings(tmp_path / "missing.yaml", {}, {})
