# generated from src/berth/_aio_coordinator.py by scripts/twin.py — do not edit: change the source and run the script
"""`Coordinator`: suspend and wake over `CoordinatorCore`'s plans (generated: see its source)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from berth._coordinator_core import CoordinatorCore, QuestionsLike, Wake
from berth._envelope import Envelope
from berth._observe import instrument
from berth._plan import run
from berth._public import publish
from berth._store import Store, StoreSteps

__all__ = ["Coordinator"]


class Coordinator:
    """The suspend/wake protocol over an envelope store and a question store.

    Safe to share (between threads, or between the tasks of one event loop for `berth.aio`'s); any
    number of coordinators, sync or async, in any number of processes and hosts, may wake the same
    keys: exactly one resumes each parked run.
    """

    def __init__(
        self,
        store: Store,
        questions: QuestionsLike,
        *,
        default_deadline: timedelta = timedelta(days=14),
        validate: Callable[[Envelope], Any] | None = None,
        clock: Callable[[], datetime] | None = None,
    ):
        """Build a coordinator.

        Args:
            store: where envelopes are parked.
            questions: where questions and answers live (same identity as `store`).
            default_deadline: stamped on envelopes parked without a deadline; `suspend`
                refuses a negative one.
            validate: called with each parked envelope on wake; raising `ConfigDrift`
                (or `Expired`) marks the run dead, e.g.
                `lambda env: berth.check_resumable(env, provider=..., model=..., config_digest=...)`.
            clock: returns "now" as an aware datetime; the store's clock when None.
        """
        store_core = store.core
        self.core = CoordinatorCore(
            store_core, default_deadline=default_deadline, validate=validate, clock=clock or store.now
        )
        """Every decision of suspend and wake, as plans (one core class serves the sync and the async coordinator)."""
        self.store = store
        self.questions = questions
        self._targets = {StoreSteps: store.steps, QuestionsLike: questions}
        instrument(self, "coordinator", identity=store.identity, backend=store.backend)

    def __repr__(self) -> str:
        return f"Coordinator({self.store!r}, {self.questions!r}, default_deadline={self.default_deadline!r})"

    @property
    def identity(self) -> str:
        """The identity of the envelope store."""
        return self.core.identity

    @property
    def default_deadline(self) -> timedelta:
        """Stamped on envelopes parked without a deadline."""
        return self.core.default_deadline

    @default_deadline.setter
    def default_deadline(self, value: timedelta) -> None:
        self.core.default_deadline = value

    @property
    def validate(self) -> Callable[[Envelope], Any] | None:
        """Called with each parked envelope on wake (see `__init__`)."""
        return self.core.validate

    @validate.setter
    def validate(self, value: Callable[[Envelope], Any] | None) -> None:
        self.core.validate = value

    # --- suspend ------------------------------------------------------------------------

    def suspend(self, key: str, envelope: Envelope, question: str | None = None) -> Envelope:
        """Park `envelope` under `key`, then ask a human `question` about it.

        Stamps `created_at` and, when none is set, the default deadline (an
        explicit deadline is kept), and the `QUESTION_LABEL` label naming a fresh
        random question id. Saves, and only once the save succeeded asks the
        question, so nobody is asked about a run that did not park.

        Args:
            key: the suspension's name within this identity.
            envelope: the run's state; see docs/coordinator.md for what is checked.
            question: what to ask; None (or empty) asks the `question` input of the first
                pending call that has one, else a sentence naming the run and its reason.

        Returns:
            The envelope as parked.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            InvalidEnvelope: a negative default deadline, or an envelope berth refuses
                (nothing saved, nothing asked).
            EnvelopeTooLarge, BackendError: the save failed (nothing asked).
            BerthError: the save succeeded but asking failed: the run stays parked and wakes
                rearm until its deadline; suspending it again re-parks and asks again.
        """
        return run(self.core.suspend_plan(key, envelope, question), self._targets)

    # --- wake ---------------------------------------------------------------------------

    def wake(self, key: str) -> Wake:
        """Decide what to do with the run parked under `key`: FRESH, REARM or RESUME.

        - FRESH: nothing is parked; or it was dead (past its deadline, or `validate`
          raised `ConfigDrift`) and was removed, its question consumed (also when
          another waker removed it first).
        - REARM: parked and not answered yet (nothing changed); or another waker won
          the claim; or the store or question store failed (`error` is set): the
          envelope stays parked.
        - RESUME: this caller's conditional delete succeeded; `envelope` and `answer`
          are set and the question is consumed (a failure to consume is logged, not
          raised: the delete is the commit point).

        Args:
            key: the suspension's name within this identity.

        Returns:
            `Wake(decision, envelope, answer)`, with `error` and `reason`.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
        """
        return run(self.core.wake_plan(key), self._targets)


publish(globals())  # its public names read as berth.X
