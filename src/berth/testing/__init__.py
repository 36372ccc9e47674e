"""`StoreContract`: the store contract as a pytest suite any backend can run.

Subclass it in a test module and override one fixture::

    import functools, berth.testing
    from myapp.storage import MyBackend

    class TestMyBackend(berth.testing.StoreContract):
        @pytest.fixture
        def backend_opener(self, tmp_path):
            # a picklable zero-argument callable that opens a new handle onto
            # one fresh, empty storage namespace (the same one on every call)
            return functools.partial(MyBackend, str(tmp_path))

Every numbered semantic of docs/contract.md is a test here (and the page names each case), including races between
threads and between processes, expiry under an injected clock, tampering,
frames moved between keys and identities, and downgrades to plaintext. Set
`cross_process = False` for a backend whose handles cannot reach the same
storage from another process (the memory backend): its claim race then runs in
threads. Override `sealer` to run the
contract under another sealer; it must be picklable for the process races.
"""

from __future__ import annotations

try:
    import pytest  # noqa: F401 - the suite is pytest classes: without pytest, say which extra installs it
except ModuleNotFoundError as exc:  # pragma: no cover - the suite runs under pytest
    if exc.name != "pytest":
        raise
    raise ImportError("berth.testing needs pytest: pip install 'berthing[testing]'") from exc

from berth.testing._async import AsyncStoreContract, Portal
from berth.testing._async import AwaitingStore as AwaitingStore
from berth.testing._contract import StoreContract
from berth.testing._fixtures import BAD_IDENTITIES as BAD_IDENTITIES
from berth.testing._fixtures import BAD_KEYS as BAD_KEYS
from berth.testing._fixtures import GOOD_KEYS as GOOD_KEYS
from berth.testing._fixtures import SECRET as SECRET
from berth.testing._fixtures import FakeClock, make_envelope
from berth.testing._recording import RecordingBackend

__all__ = ["AsyncStoreContract", "FakeClock", "RecordingBackend", "StoreContract", "make_envelope"]

# Also importable here, outside the public face (`__all__`), for berth's own tests: the cases' inputs
# (above, `as` themselves) and the event loop in a thread through which the async contract drives an
# AsyncStore, under its first name.
_Portal = Portal

for _name in __all__:  # reprs and tracebacks name the public path, as before the split into modules
    globals()[_name].__module__ = __name__
