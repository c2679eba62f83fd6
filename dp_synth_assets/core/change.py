"""Change detection of a private source without publishing anything computed from its content
(docs/decisions/0003-privacy-perimeter.md): the algorithm, with no I/O.

The installation's secret (32 random bytes, `secret_from_hex` or an owner-only file of the
private zone) keys an HMAC-SHA256 of a summary of the source, kept privately per dataset
(`infra.private_files.observe`); the public version is an opaque random id (`mint_version`),
minted when the MAC differs from the stored one and repeated while it does not (`advance`). It
says "changed since last time" and nothing else: it is not a function of the content, so an
adversary who knows every row but one has nothing to test candidates against."""

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

SECRET_BYTES = 32


class ChangeDetectionError(Exception):
    """The change-detection secret or state cannot be used (unreadable, wrong size)."""


@dataclass(frozen=True)
class ChangeState:
    """What one dataset's change detection remembers (private): the MAC of the last signal
    seen, the public id minted for it and when (UTC, ISO 8601)."""

    mac: str
    version: str
    changed_at: str


def secret_from_hex(text: str, where: str) -> bytes:
    """The installation's secret given as 64 hexadecimal digits (32 bytes) by `where` (an
    environment variable a secret store fills: a container has no secret file), or a
    ChangeDetectionError that names `where` and never quotes the value."""
    try:
        secret = bytes.fromhex(text.strip())
    except ValueError:
        secret = b""
    if len(secret) != SECRET_BYTES:
        raise ChangeDetectionError(
            f"{where} does not hold a change-detection secret: it must be {2 * SECRET_BYTES} "
            f"hexadecimal digits ({SECRET_BYTES} random bytes), e.g. the output of `python -c "
            f"\"import secrets; print(secrets.token_hex({SECRET_BYTES}))\"`; keep the same value "
            f"in every deployment (a new one makes the next observation of each source a change)")
    return secret


def change_mac(secret: bytes, signal: str) -> str:
    """HMAC-SHA256 of a change signal under the installation's secret (hex)."""
    return hmac.new(secret, signal.encode(), hashlib.sha256).hexdigest()


def mint_version() -> str:
    """A fresh public version id: 128 random bits, independent of any data."""
    return secrets.token_hex(16)


def advance(state: ChangeState | None, mac: str, mint: Callable[[], str] = mint_version,
            now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> ChangeState:
    """The state after seeing a signal whose MAC is `mac`: unchanged (same public id) when the MAC
    equals the stored one, otherwise a new id minted now. Comparison is constant-time."""
    if state is not None and hmac.compare_digest(state.mac, mac):
        return state
    return ChangeState(mac=mac, version=mint(), changed_at=now().isoformat())
