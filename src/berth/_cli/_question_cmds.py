"""The question commands: `questions` lists what parked runs ask, `answer` gives a human's answer."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import IO, Any

import click

from berth._cli._app import CONTEXT, cli, output_options, store_options
from berth._cli._failures import bad_usage, refuse
from berth._cli._output import (
    SHORT_ID,
    console,
    emit_json,
    emit_jsonl,
    escape,
    print_rows,
    short_ids,
    stdout_is_terminal,
    terminal_safe,
)
from berth._cli._settings import Settings, remember_key, user_name
from berth._errors import where
from berth._format import deadline_text, now, rfc3339, span


@cli.command("questions", context_settings=CONTEXT)
@click.option("--prefix", default="", metavar="PREFIX", help="Only keys that start with PREFIX.")
@output_options(stream=True)
@store_options(env=False)
@click.pass_obj
def questions_cmd(settings: Settings, prefix: str, out: str | None) -> None:
    """List the questions parked runs wait on, with deadlines.

    \b
    Example:
      berth questions --prefix org/repo
    """
    store = settings.open(keys=False)
    deadlines = {item.key: item.deadline for item in store.list(prefix)}
    qs = settings.questions()
    for head in qs.headers(prefix):  # a question under a key of its own (one per tool call) keeps the run's deadline
        deadlines.setdefault(head.key, head.deadline)
    at = now()
    rows: list[dict[str, Any]] = []
    for q, a in qs.list(prefix):
        doc = _question_doc(q, a, deadlines.get(q.key))
        if out == "jsonl":
            emit_jsonl(doc)
        else:
            rows.append(doc)
    if out == "json":
        emit_json(rows)
    elif out is None:
        if not rows:
            click.echo(f"no pending questions for {where(store.identity)}", err=True)
            return
        _print_questions(rows, at)


_QUESTION_COLUMNS = ("KEY", "QUESTION ID", "ASKED", "DEADLINE", "STATUS", "QUESTION")


def _print_questions(rows: list[dict[str, Any]], at: datetime) -> None:
    """The questions table: on a terminal, ids shortened to their shortest unique prefix; in a pipe, a line each."""

    def cells(doc: dict[str, Any], qid: str) -> list[str]:
        dl = datetime.fromisoformat(doc["deadline"]) if doc["deadline"] else None
        status = f"answered by {doc['answered_by']}" if doc["answered"] else "waiting"
        return [
            terminal_safe(doc["key"]),
            terminal_safe(qid),
            span((at - datetime.fromisoformat(doc["asked_at"])).total_seconds()),
            deadline_text(dl, at),
            terminal_safe(status),
            terminal_safe(doc["prompt"]),
        ]

    if not stdout_is_terminal():
        print_rows(_QUESTION_COLUMNS, (cells(doc, doc["question_id"]) for doc in rows))
        return
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True, header_style="bold")
    table.add_column("KEY", overflow="fold")
    table.add_column("QUESTION ID", no_wrap=True)
    table.add_column("ASKED", no_wrap=True)
    table.add_column("DEADLINE", no_wrap=True)
    table.add_column("STATUS", overflow="fold")
    table.add_column("QUESTION", overflow="fold", ratio=1)
    shown = short_ids(doc["question_id"] for doc in rows)
    for doc in rows:
        table.add_row(*map(escape, cells(doc, shown[doc["question_id"]])))
    console().print(table)


def _question_doc(q: Any, a: Any, deadline: datetime | None) -> dict[str, Any]:
    return {
        "key": q.key,
        "question_id": q.id,
        "run_id": q.run_id,
        "prompt": q.prompt,
        "asked_at": rfc3339(q.asked_at),
        "deadline": rfc3339(deadline),
        "decisions": [d.value for d in q.decisions],
        "tool": None
        if q.tool is None
        else {
            "name": q.tool.name,
            "arguments": dict(q.tool.arguments),
            "agent": q.tool.agent,
            "description": q.tool.description,
            "call_id": q.tool.call_id,
        },
        "answered": a is not None,
        "answered_by": None if a is None else a.by,
        "answered_at": None if a is None else rfc3339(a.answered_at),
        "decision": None if a is None else a.decision.value,
    }


@cli.command("answer", context_settings=CONTEXT)
@click.argument("key", callback=remember_key)
@click.argument("text", required=False)
@click.option("--file", "file", type=click.File("r"), metavar="FILE|-", help="Read the answer from a file or stdin.")
@click.option(
    "--question",
    "question_id",
    default=None,
    metavar="ID",
    help="The id of the question you answer, or its first 8+ characters (from `berth questions`); "
    "refused if it is not the pending one. "
    "Without it, on a terminal, berth shows the pending question and asks you to confirm.",
)
@click.option("--by", default=None, metavar="NAME", help="Who answers (default: your user name).")
@click.option("--approve", "approve", is_flag=True, help="Approve the tool call (TEXT, if given, is a note).")
@click.option("--reject", "reject", default=None, metavar="REASON", help="Reject it; REASON goes back to the model.")
@click.option(
    "--edit",
    "edit",
    default=None,
    metavar="JSON",
    help="Run the tool call with these arguments instead (a JSON object; TEXT, if given, is a note).",
)
@output_options()
@store_options(env=False)
@click.pass_obj
def answer_cmd(
    settings: Settings,
    key: str,
    text: str | None,
    file: IO[str] | None,
    question_id: str | None,
    by: str | None,
    approve: bool,
    reject: str | None,
    edit: str | None,
    out: str | None,
) -> None:
    """Answer the question the run parked under KEY is waiting on.

    The answer is bound to one question: the one --question names, or, without
    it, the one shown on the terminal and confirmed. A question that was
    superseded meanwhile (the run re-parked with a new one) is refused, never
    answered in its place. Without a terminal (or with --file -) --question is
    required.

    A tool approval takes a decision: --approve, --reject REASON, or --edit JSON
    (the call runs with exactly those arguments). Plain TEXT given to an approval
    approves only when it is exactly an approval (`approve`, `yes`, ...); any other
    text never approves: the run gets it back as a rejection's reason.

    \b
    Example:
      berth questions --prefix org/repo
      berth answer 'org/repo#42' 'yes, push it' --question 3f0c9a...
      berth answer 'ops/ticket-7/call-1' --edit '{"repo": "acme/old"}' --question 9e1b...
    """
    decision, arguments = _decision_options(approve, reject, edit)
    if reject is not None and (text is not None or file is not None):
        raise click.UsageError("--reject takes the reason; give no TEXT or --file with it")
    if text is not None and file is not None:
        raise click.UsageError("give the answer as TEXT or with --file, not both")
    if decision is None and text is None and file is None:
        raise click.UsageError("give the answer as TEXT, or with --file FILE (- for stdin), or a decision")
    from_stdin = file is not None and getattr(file, "name", "") in ("<stdin>", "-")
    if reject is not None:
        body = reject
    else:
        body = text if text is not None else file.read() if file is not None else ""
    qs = settings.questions()
    q = qs.pending(key)
    if q is None:
        per_call = sorted(h.key for h in qs.headers(key + "/call-"))  # a framework run: one question per tool call
        if per_call:
            refuse(
                f"no question is pending at {where(settings.who, key)}: its run waits on one question per "
                f"tool call; answer each of {', '.join(repr(k) for k in per_call)}"
            )
        refuse(f"no question is pending at {where(settings.who, key)}")
    if question_id is None:
        shown = f"question {q.id} at {where(settings.who, key)}: {terminal_safe(repr(q.prompt))}"
        if q.tool is not None:
            # repr and JSON escapes: no control character reaches the terminal
            shown += f" (tool {terminal_safe(repr(q.tool.name))}, arguments {json.dumps(dict(q.tool.arguments))})"
        if from_stdin or not sys.stdin.isatty():
            bad_usage(
                f"without a terminal nothing confirms which question this answers; the pending {shown}; "
                f"to answer it, add --question {q.id}"
            )
        click.echo(f"the pending {shown}", err=True)
        if not click.confirm("Answer this question?", default=False, err=True):
            refuse(f"not answered: {where(settings.who, key)} still waits on question {q.id}")
        question_id = q.id
    else:
        question_id = _named_question(settings, key, question_id, q.id)
    who = by or user_name()
    # provide() refuses (AnswerRefused, exit 1) unless `question_id` is still the pending question.
    answer = qs.provide(key, question_id, body, by=who, decision=decision, arguments=arguments)
    if out:
        emit_json(
            {
                "key": key,
                "question_id": answer.question_id,
                "prompt": q.prompt if q.id == answer.question_id else None,
                "decision": answer.decision.value,
                "arguments": None if answer.arguments is None else dict(answer.arguments),
                "by": answer.by,
                "answered_at": rfc3339(answer.answered_at),
            }
        )
        return
    decided = "" if answer.decision.value == "respond" else f" ({answer.decision.value})"
    click.echo(
        f"answered question {answer.question_id} ({terminal_safe(repr(q.prompt))}) at {where(settings.who, key)} "
        f"as {terminal_safe(who)}{decided}: the next waker resumes the run"
    )


def _named_question(settings: Settings, key: str, given: str, pending: str) -> str:
    """The id `--question` names: a whole id as given, or the pending question's for a prefix of it.

    A whole id that is not the pending question's is passed on for `provide` to refuse (superseded
    or answered); a prefix names the pending question or nothing: it is never reported superseded.
    """
    if len(given) >= len(pending):
        return given
    if len(given) < SHORT_ID:
        bad_usage(
            f"--question {given!r} is too short to name a question at {where(settings.who, key)}: "
            f"give at least {SHORT_ID} characters of its id (`berth questions` shows them)"
        )
    if pending.startswith(given):
        return pending
    refuse(
        f"no question at {where(settings.who, key)} has an id starting {given!r}: the pending one is "
        f"{pending[:SHORT_ID]}… (`berth questions` lists them)"
    )


def _decision_options(approve: bool, reject: str | None, edit: str | None) -> tuple[str | None, Any]:
    """The decision --approve, --reject or --edit names (at most one), with the edit's arguments."""
    named = [
        n for n, given in (("approve", approve), ("reject", reject is not None), ("edit", edit is not None)) if given
    ]
    if len(named) > 1:
        raise click.UsageError(f"give one decision, not {' and '.join('--' + n for n in named)}")
    if edit is None:
        return (named[0] if named else None), None
    try:
        arguments = json.loads(edit)
    except ValueError as exc:
        bad_usage(f"--edit takes the tool's new arguments as a JSON object: {exc}")
    if not isinstance(arguments, dict):
        bad_usage(f"--edit takes the tool's new arguments as a JSON object, got a JSON {type(arguments).__name__}")
    return "edit", arguments
