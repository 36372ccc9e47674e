"""The question commands: `questions` lists what parked runs ask, `answer` gives a human's answer."""

from __future__ import annotations

from datetime import datetime
from typing import IO, Any

import click

from berth._cli._app import CONTEXT, cli, output_options, store_options
from berth._cli._failures import refuse, where
from berth._cli._output import console, deadline_text, emit_json, emit_jsonl, escape, now, rfc3339, span
from berth._cli._settings import Settings, remember_key, user_name


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
        from rich import box
        from rich.table import Table

        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True, header_style="bold")
        table.add_column("KEY", overflow="fold")
        table.add_column("ASKED", no_wrap=True)
        table.add_column("DEADLINE", no_wrap=True)
        table.add_column("STATUS", overflow="fold")
        table.add_column("QUESTION", overflow="fold", ratio=1)
        for doc in rows:
            dl = datetime.fromisoformat(doc["deadline"]) if doc["deadline"] else None
            status = f"answered by {doc['answered_by']}" if doc["answered"] else "waiting"
            table.add_row(
                escape(doc["key"]),
                span((at - datetime.fromisoformat(doc["asked_at"])).total_seconds()),
                deadline_text(dl, at),
                escape(status),
                escape(doc["prompt"]),
            )
        console().print(table)


def _question_doc(q: Any, a: Any, deadline: datetime | None) -> dict[str, Any]:
    return {
        "key": q.key,
        "question_id": q.id,
        "run_id": q.run_id,
        "prompt": q.prompt,
        "asked_at": rfc3339(q.asked_at),
        "deadline": rfc3339(deadline),
        "answered": a is not None,
        "answered_by": None if a is None else a.by,
        "answered_at": None if a is None else rfc3339(a.answered_at),
    }


@cli.command("answer", context_settings=CONTEXT)
@click.argument("key", callback=remember_key)
@click.argument("text", required=False)
@click.option("--file", "file", type=click.File("r"), metavar="FILE|-", help="Read the answer from a file or stdin.")
@click.option("--by", default=None, metavar="NAME", help="Who answers (default: your user name).")
@output_options()
@store_options(env=False)
@click.pass_obj
def answer_cmd(
    settings: Settings, key: str, text: str | None, file: IO[str] | None, by: str | None, out: str | None
) -> None:
    """Answer the question the run parked under KEY is waiting on.

    \b
    Example:
      berth answer 'org/repo#42' 'yes, push it'
    """
    if text is None and file is None:
        raise click.UsageError("give the answer as TEXT, or with --file FILE (- for stdin)")
    if text is not None and file is not None:
        raise click.UsageError("give the answer as TEXT or with --file, not both")
    body = text if text is not None else file.read()  # type: ignore[union-attr]
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
    who = by or user_name()
    answer = qs.provide(key, q.id, body, by=who)
    if out:
        emit_json({"key": key, "question_id": q.id, "by": answer.by, "answered_at": rfc3339(answer.answered_at)})
        return
    click.echo(f"answered {key!r} for {where(settings.who)} as {who}: the next waker resumes the run")
