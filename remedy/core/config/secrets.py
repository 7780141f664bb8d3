"""What looks like a secret, and the one masking every output of remedy goes through.

remedy reads a host's whole runtime state (the manager's environment, the /run drop-ins,
the serving process) and reports it: as text, ``--json``, the audit log, the textfile
metrics and pyinfra's ``-v`` logs. A credential someone put there with ``systemctl
set-environment HF_TOKEN=…`` or a drop-in's ``Environment=SMTP_PASS=…`` must not leave
the host that way, nor be copied into the repository by ``remedy adopt``.

What counts as a secret:

* a name like one (``SECRET_RE``): PASS, SECRET, TOKEN, KEY, CREDENTIAL or AUTH anywhere
  in it, any case (``SMTP_PASS``, ``HF_TOKEN``, ``SetCredential``, ``--api-key``); a
  count of tokens (``MAX_TOKENS``, ``--max-num-batched-tokens``) and a tokenizer
  (``TOKENIZERS_PARALLELISM``) are not;
* a value like one (``secret_value``), whatever its name: a URL with user information
  that holds a password or a token (``http://user:pw@proxy``, ``https://ghp_…@github``;
  a plain user name such as ``git@`` or ``ops@`` is no secret), or a private key.

How it is masked: the value gives way to ``MASK``; the name stays, so a person still sees
what is there. ``masked`` does that in free text (``NAME=VALUE``, ``"NAME=VALUE with
blanks"``, ``NAME = "VALUE"``, ``--flag VALUE``, URLs), ``masked_doc`` in a document
before it is written as JSON (also a dict keyed by variable names, and an argv list).
"""

from __future__ import annotations

import re

MASK = "…"

SECRET_RE = re.compile(r"PASS|SECRET|TOKEN(?!S(?![a-z])|IZER)|KEY|CREDENTIAL|AUTH", re.I)

# scheme://USERINFO@ (RFC 3986: no /, ?, #, @ in it)
URL_USERINFO_RE = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/?#@'\"<>]+)@"
)
# a plain user name (git@github.com, ops@host): said, not masked
PLAIN_USER_RE = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
PRIVATE_KEY_RE = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S
)
# NAME= of NAME=VALUE: a variable, a property, a nix attribute path (NAME = "VALUE" with
# blanks only when a quote follows, lib.mkForce between); an opening quote before NAME
# ("NAME=VALUE with blanks", as systemd's Environment= takes it) is kept to find the end
ASSIGNMENT_RE = re.compile(
    r"(?P<open>[\"'])?(?<![A-Za-z0-9_.-])(?P<name>[A-Za-z_][A-Za-z0-9_.]*)"
    r"(?P<eq>=|[ \t]*=[ \t]*(?:lib\.mkForce[ \t]+)?(?=[\"']))"
)
_VALUE_END_RE = re.compile(r"[\s;,'\"]")
# --flag VALUE or --flag=VALUE
FLAG_RE = re.compile(
    r"(?<![A-Za-z0-9-])(?P<flag>--[A-Za-z0-9][A-Za-z0-9-]*)(?P<sep>=|[ \t]+)"
    r"(?P<value>\"[^\"]*\"|'[^']*'|[^\s;,'\"`]+)"
)
# what remedy itself writes after a flag's name: no value of the host's
_FLAG_WORDS = frozenset({MASK, "gone", "added", "→"})
# remedy's own options whose value is a name, never a secret
_OWN_FLAGS = frozenset({"--adopt-secret"})
# names of variables and properties as documents key them (dataclass fields are lower case)
_VARIABLE_KEY_RE = re.compile(r"[A-Z_][A-Za-z0-9_]*")


def secret_name(name: str) -> bool:
    """NAME (a variable, a property, a flag) is named like a secret."""
    return bool(SECRET_RE.search(name))


def _userinfo_masked(userinfo: str) -> bool:
    return ":" in userinfo or not PLAIN_USER_RE.fullmatch(userinfo)


def secret_value(value: str) -> bool:
    """VALUE looks like a secret whatever its name: a URL with a password or a token in
    its user information, or a private key."""
    if PRIVATE_KEY_RE.search(value):
        return True
    return any(_userinfo_masked(m["userinfo"]) for m in URL_USERINFO_RE.finditer(value))


def secret(name: str, value: str | None) -> bool:
    """NAME=VALUE carries a secret: by its name, or by its value."""
    return secret_name(name) or (value is not None and secret_value(value))


def shown_value(name: str, value: str) -> str:
    """VALUE of NAME as a report shows it: MASK for a secret, else its URLs' passwords
    masked."""
    return MASK if secret_name(name) else masked(value)


def shown(name: str, value: str) -> str:
    """NAME=VALUE for a report; a secret's value is never printed."""
    return f"{name}={shown_value(name, value)}"


def _userinfo(m: re.Match) -> str:
    return f"{m['scheme']}{MASK}@" if _userinfo_masked(m["userinfo"]) else m[0]


def _value_end(text: str, start: int, opened: str | None) -> int:
    """Where the value that starts at START ends: at the quote that closes OPENED (the
    quote before its name), past its own closing quote, else at a blank, ; , or quote."""
    if opened:
        end = text.find(opened, start)
        return len(text) if end < 0 else end
    if text[start : start + 1] in ("'", '"'):
        end = text.find(text[start], start + 1)
        return len(text) if end < 0 else end + 1
    m = _VALUE_END_RE.search(text, start)
    return m.start() if m else len(text)


def _assignments_masked(text: str) -> str:
    """TEXT with the value of every NAME=VALUE whose name is a secret's masked. A value
    may itself hold an assignment (``Environment=HF_TOKEN=x``): the scan goes on right
    after each name that is not a secret's."""
    out, done, at = [], 0, 0
    while m := ASSIGNMENT_RE.search(text, at):
        if not secret_name(m["name"]):
            at = m.end("name")
            continue
        start = m.end()
        end = _value_end(text, start, m["open"])
        value = text[start:end]
        quote = value[0] if not m["open"] and value[:1] in ("'", '"') else ""
        if value.strip("\"'") not in ("", MASK):
            out += [text[done:start], f"{quote}{MASK}{quote}"]
            done = end
        at = max(end, m.end())
    return "".join(out) + text[done:]


def _flag(m: re.Match) -> str:
    if (
        not secret_name(m["flag"])
        or m["flag"] in _OWN_FLAGS
        or m["value"].startswith("-")
        or m["value"] in _FLAG_WORDS
    ):
        return m[0]
    return f"{m['flag']}{m['sep']}{MASK}"


def masked(text: str) -> str:
    """TEXT with every secret's value masked: private keys, the user information of URLs
    that holds a password or token, the values of variables, properties and flags named
    like a secret."""
    if not text:
        return text
    text = PRIVATE_KEY_RE.sub(MASK, text)
    text = URL_USERINFO_RE.sub(_userinfo, text)
    text = _assignments_masked(text)
    return FLAG_RE.sub(_flag, text)


def _all_masked(value):
    """The value of a variable named like a secret, in a document: a string goes; of a
    {value, source} mapping, the value goes and where it comes from stays."""
    if isinstance(value, str):
        return MASK
    if isinstance(value, dict):
        return {k: MASK if k == "value" and isinstance(v, str) else masked_doc(v)
                for k, v in value.items()}  # fmt: skip
    return masked_doc(value)


def masked_doc(value):
    """VALUE (a document of dicts, lists and scalars, as it goes to JSON) with every
    secret masked: each string as ``masked`` does; the value of a key that is a variable
    or property named like a secret (``{"HF_TOKEN": "…"}``); in an argv list, the word
    after a flag named like one (``["--api-key", "…"]``)."""
    if isinstance(value, str):
        return masked(value)
    if isinstance(value, dict):
        return {
            k: _all_masked(v)
            if isinstance(k, str) and _VARIABLE_KEY_RE.fullmatch(k) and secret_name(k)
            else masked_doc(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        items = [masked_doc(v) for v in value]
        for i, word in enumerate(items[:-1]):
            following = items[i + 1]
            if (
                isinstance(word, str)
                and re.fullmatch(r"--[A-Za-z0-9][A-Za-z0-9-]*", word)
                and secret_name(word)
                and isinstance(following, str)
                and not following.startswith("-")
            ):
                items[i + 1] = MASK
        return items
    return value
