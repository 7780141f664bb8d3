"""Who may sign what a bump takes: git's ``gpg.ssh.allowedSignersFile``, and the
signature state ``git log --format=%G?`` reports.

The file stays on the host that runs remedy (``trusted_signers``); its text is sent
with the check, which writes it to a temporary file that goes with the command. It
is never written into the person's checkout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from remedy.errors import ConfigError

KEY_TYPES = re.compile(r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-\S+|sk-\S+)$")

# git log's %G? for an SSH signature checked against the allowed-signers file
STATES = {
    "G": "signed by a trusted key",
    "U": "signed by a key that is not in trusted_signers",
    "B": "a bad signature",
    "X": "signed, but the signature has expired",
    "Y": "signed by a key that has expired",
    "R": "signed by a revoked key",
    "E": "signed, but the signature cannot be checked",
    "N": "unsigned",
}


def check_allowed_signers(text: str, path: str) -> int:
    """The number of keys in an allowed-signers file; ConfigError naming the file and
    line that is not ``PRINCIPALS [OPTIONS] KEYTYPE KEY``."""
    keys = 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if not any(KEY_TYPES.match(w) for w in words[1:-1]):
            raise ConfigError(
                f"trusted_signers {path}, line {n}: not 'PRINCIPALS [OPTIONS] KEYTYPE KEY' "
                "(git's gpg.ssh.allowedSignersFile format, e.g. "
                "'ops@example namespaces=\"git\" ssh-ed25519 AAAA…')"
            )
        keys += 1
    if not keys:
        raise ConfigError(f"trusted_signers {path}: no key in it; add the keys that may sign")
    return keys


@dataclass(frozen=True)
class Signature:
    """A rev's signature as git reads it against the allowed signers."""

    rev: str
    state: str  # one of STATES' keys
    key: str | None  # the signing key's fingerprint
    signer: str | None  # the principal that matched
    author: str

    @property
    def trusted(self) -> bool:
        return self.state == "G"

    def describe(self) -> str:
        what = STATES.get(self.state, f"signature state {self.state}")
        key = f" ({self.key})" if self.key and self.state != "G" else ""
        who = f" as {self.signer}" if self.signer else ""
        return f"{self.rev[:12]} by {self.author}: {what}{key}{who if self.trusted else ''}"


def parse_signature(line: str, rev: str) -> Signature | None:
    """``signature STATE|KEY|SIGNER|AUTHOR`` as the host's check prints it."""
    if not line.startswith("signature "):
        return None
    state, key, signer, author = ([*line[10:].split("|", 3), "", "", ""])[:4]
    return Signature(rev, state.strip() or "E", key or None, signer or None, author or "?")
