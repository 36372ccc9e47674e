"""Where the store is and how it is sealed: flags, then the environment, then defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import click

import berth
from berth._cli._failures import NOT_FOUND, Failure, bad_usage, warn
from berth._errors import StoreMissing, where

# The library's modules (berth._store, _config, _redact, _atomic...) are imported where a command
# first needs them, never here: `berth --help` loads click and the command line only.

__all__ = [
    "DEFAULT_IDENTITY",
    "Settings",
    "default_url",
    "find_listing",
    "load_keyring",
    "remember_key",
    "user_name",
]

DEFAULT_IDENTITY = "default"


def default_url(*, create: bool = True) -> str:
    """`sqlite:////…` (an absolute path) in the user's data directory, created 0700 unless `create=False`."""
    from urllib.parse import quote

    import platformdirs

    from berth._atomic import make_dirs

    directory = platformdirs.user_data_path("berth", appauthor=False)
    if create:
        make_dirs(directory)  # with its parents (~/.local/share), 0700 whatever the umask
    return "sqlite:///" + quote(str(directory / "berth.db"))


@dataclass
class Settings:
    """Where the store is and how it is sealed, from flags, then the environment, then defaults."""

    url: str | None = None
    identity: str | None = None
    keyring: str | None = None
    witness: str | None = None
    command: str = "berth"
    key: str | None = None
    create: bool = False
    """The command may create the store (`park`, `setup`, `serve`); every other opens only what exists."""
    json_out: bool = False
    """The command was asked for `--json` or `--jsonl`: a failure is a JSON object on stdout too."""
    _stores: list[Any] = field(default_factory=list)
    _sealer: berth.Sealer | None = None

    @property
    def who(self) -> str:
        """The identity commands run as."""
        return self.identity or DEFAULT_IDENTITY

    def for_identity(self, identity: str) -> Settings:
        """The same store and sealer settings for `identity`; what it opens closes with these settings' stores."""
        return Settings(
            url=self.url,
            identity=identity,
            keyring=self.keyring,
            witness=self.witness,
            command=self.command,
            create=self.create,
            _stores=self._stores,
        )

    def store_url(self) -> str:
        """The configured store URL, or the default SQLite file."""
        return self.url or default_url(create=self.create)

    def sealer(self) -> berth.Sealer | None:
        """The configured sealer, or None when nothing is configured (plaintext).

        `--keyring` stands in for `BERTH_KEYRING`; `berth.sealer_from_env` reads the
        rest (`BERTH_KMS`, and both together: the KMS seals, the keyring still opens).
        """
        environ = dict(os.environ)
        if self.keyring:
            if not environ.get("BERTH_KMS", "").strip():
                return berth.AesGcmSealer(load_keyring(self.keyring))
            environ["BERTH_KEYRING"] = self.keyring
        try:
            return berth.sealer_from_env(environ)
        except (berth.BerthError, ValueError, OSError) as exc:
            bad_usage(f"{where(self.who)}: sealer configuration: {exc}")

    def open(self, *, keys: bool, accept_plaintext: bool = False) -> berth.Store:
        """Open the store; `keys=False` for commands that read headers only and need no sealer.

        With a witness (`--witness`, `BERTH_WITNESS`) every command needs the keys: the witness's
        records are sealed, and a sweep or a delete records how each frame left.
        """
        from berth._redact import redact_text, redact_url

        url = self.store_url()
        sealer = self._resolved_sealer() if keys or self.witness else berth.PlaintextSealer()
        try:
            store = berth.open_store(
                url,
                identity=self.who,
                sealer=sealer,
                accept_plaintext=accept_plaintext,
                witness=self.witness,
                create=self.create,
            )
        except berth.InvalidKey as exc:
            bad_usage(str(exc))
        except StoreMissing as exc:
            raise Failure(
                f"{where(self.who)}: no store at {redact_url(url)}: {redact_text(str(exc), url)}", NOT_FOUND
            ) from None
        except berth.BerthError as exc:
            why = redact_text(str(exc), url)
            if self.witness:
                why = redact_text(why, self.witness)
            bad_usage(f"{where(self.who)}: cannot open store {redact_url(url)}: {why}")
        self._stores.append(store)
        return store

    def questions(self, *, keys: bool = True, notify: berth.Webhook | None = None) -> berth.QuestionStore:
        """Open the question store next to the envelope store, sealed by the same sealer.

        `keys=False` for sweeping, which reads headers only; `notify` is told of answers given through it.
        """
        from berth._redact import redact_text, redact_url

        url = self.store_url()
        sealer = self._resolved_sealer() if keys else berth.PlaintextSealer()
        try:
            qs = berth.open_questions(url, identity=self.who, sealer=sealer, notify=notify, create=self.create)
        except berth.InvalidKey as exc:
            bad_usage(str(exc))
        except StoreMissing as exc:
            raise Failure(
                f"{where(self.who)}: no store at {redact_url(url)}: {redact_text(str(exc), url)}", NOT_FOUND
            ) from None
        except berth.BerthError as exc:
            bad_usage(f"{where(self.who)}: cannot open questions at {redact_url(url)}: {redact_text(str(exc), url)}")
        self._stores.append(qs)
        return qs

    def _resolved_sealer(self) -> berth.Sealer:
        if self._sealer is None:
            sealer = self.sealer()
            if sealer is None:
                from berth._redact import redact_url

                warn(
                    f"{where(self.who)} at {redact_url(self.store_url())} is not sealed (plaintext, for development): "
                    "set BERTH_KEYRING or BERTH_KMS to seal it"
                )
                sealer = berth.PlaintextSealer()
            self._sealer = sealer
        return self._sealer

    def close(self) -> None:
        """Close every store this invocation opened."""
        while self._stores:
            self._stores.pop().close()


def user_name() -> str:
    """Who is at this terminal: the login name, or `cli` when the system cannot tell."""
    import getpass

    try:
        return getpass.getuser()
    except Exception:
        return "cli"


def load_keyring(path: str, *, allow_readable: bool | None = None) -> berth.Keyring:
    """Read a keyring file, as a configuration error (exit 2) when it cannot be read.

    A file others can read is refused unless `allow_readable` (default: what
    `BERTH_KEYRING_ALLOW_READABLE` says).
    """
    if allow_readable is None:
        from berth._config import keyring_readable_allowed

        allow_readable = keyring_readable_allowed()
    try:
        return berth.Keyring.load(path, allow_readable=allow_readable)
    except PermissionError as exc:
        if exc.errno is None:  # refused for its mode: the message names the fix
            bad_usage(str(exc))
        bad_usage(f"keyring {path!r} cannot be read: {exc.strerror or exc}")
    except FileNotFoundError:
        bad_usage(f"keyring {path!r} does not exist: create one with `berth keys generate {path}`")
    except OSError as exc:
        bad_usage(f"keyring {path!r} cannot be read: {exc.strerror or exc}")
    except ValueError as exc:
        bad_usage(f"keyring {path!r}: {exc}")


def find_listing(store: berth.Store, key: str) -> berth.Listing | None:
    """The listing of exactly `key`, from its header (no keys needed)."""
    store.check_key(key)
    for item in store.list(prefix=key):
        if item.key == key:
            return item
    return None


def remember_key(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A KEY argument's callback: failures name the key even before the store does."""
    ctx.ensure_object(Settings).key = value
    return value
