"""ServerTls on its own, with a clock the test moves: when it looks at the files again, what
it serves after a change that loads and one that does not, and what it logs. The servers
around it are tested in test_tls_reload.py."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from otel_delta.config import TlsSettings
from otel_delta.errors import ConfigError
from otel_delta.transports.tls import ServerTls
from tests.certs import Certs

INTERVAL = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def files(directory: Path, certs: Certs, key: Path | None = None) -> None:
    """Write `certs`' server pair (or its certificate with `key`) and CA into `directory`."""
    shutil.copyfile(certs.server_cert, directory / "tls.crt")
    shutil.copyfile(key or certs.server_key, directory / "tls.key")
    shutil.copyfile(certs.ca, directory / "ca.crt")


def server_tls(directory: Path, clock: Clock, interval: float = INTERVAL) -> ServerTls:
    settings = TlsSettings(
        cert_file=str(directory / "tls.crt"),
        key_file=str(directory / "tls.key"),
        client_ca_file=str(directory / "ca.crt"),
        reload_interval_seconds=interval,
    )
    return ServerTls(settings, clock=clock)


def messages(caplog, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and r.name.endswith("tls")]


def test_a_change_is_served_once_the_interval_has_passed(tmp_path, old, new, caplog) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    files(tmp_path, old)
    tls = server_tls(tmp_path, clock)
    first = tls.current()
    assert first.contents[0] == old.server_cert.read_bytes()
    files(tmp_path, new)
    clock.now += INTERVAL - 1
    assert tls.current() is first  # not looked at yet
    clock.now += 1
    second = tls.current()
    assert second.contents == (
        new.server_cert.read_bytes(),
        new.server_key.read_bytes(),
        new.ca.read_bytes(),
    )
    clock.now += INTERVAL
    assert tls.current() is second  # unchanged: the same, nothing made again
    assert len(messages(caplog, logging.INFO)) == 1
    assert not messages(caplog, logging.WARNING)


@pytest.mark.parametrize("broken", ["mismatched key", "half-written certificate", "missing key"])
def test_a_change_that_does_not_load_keeps_what_is_served_with_one_warning(
    tmp_path, old, new, broken, caplog
) -> None:
    clock = Clock()
    files(tmp_path, old)
    tls = server_tls(tmp_path, clock)
    first = tls.current()
    if broken == "mismatched key":
        files(tmp_path, new, key=old.server_key)
    elif broken == "half-written certificate":
        files(tmp_path, new)
        cert = new.server_cert.read_bytes()
        (tmp_path / "tls.crt").write_bytes(cert[: len(cert) // 2])
    else:
        (tmp_path / "tls.key").unlink()
    for _ in range(3):
        clock.now += INTERVAL
        assert tls.current() is first
    warnings = messages(caplog, logging.WARNING)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("receiver.tls")
    assert "config error" not in warnings[0] and "PRIVATE KEY" not in caplog.text
    assert not any(record.exc_info for record in caplog.records)

    files(tmp_path, new)  # the rotation finished
    clock.now += INTERVAL
    assert tls.current().contents[0] == new.server_cert.read_bytes()
    assert len(messages(caplog, logging.WARNING)) == 1


def test_interval_zero_never_reads_the_files_again(tmp_path, old, new) -> None:
    clock = Clock()
    files(tmp_path, old)
    tls = server_tls(tmp_path, clock, interval=0)
    first = tls.current()
    files(tmp_path, new)
    clock.now += 365 * 86400
    assert tls.current() is first
    assert not tls.reloads


def test_bad_files_at_start_are_still_one_config_error(tmp_path, old, new) -> None:
    files(tmp_path, new, key=old.server_key)
    with pytest.raises(ConfigError, match=r"receiver\.tls: cannot use cert_file") as error:
        server_tls(tmp_path, Clock())
    assert "\n" not in str(error.value)
