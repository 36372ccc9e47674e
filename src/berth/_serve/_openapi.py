"""The inbox API's OpenAPI 3.1 description, served at /api/openapi.json."""

from __future__ import annotations

from typing import Any

__all__ = ["OPENAPI"]

_STR = {"type": "string"}
_TIME = {"type": ["string", "null"], "format": "date-time"}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_ERROR = {"type": "object", "properties": {"error": _STR}, "required": ["error"]}
_DECISION = {"enum": ["approve", "reject", "edit", "respond", "ignore"]}
_OBJECT = {"type": "object", "description": "A JSON object: the tool's arguments by name."}
_TOOL = {
    "type": ["object", "null"],
    "description": "For a tool approval, the call that runs if it is approved; else null.",
    "properties": {
        "name": _STR,
        "arguments": _OBJECT,
        "agent": {"type": "string", "description": "The agent that asked for the call (may be empty)."},
        "description": {"type": "string", "description": "What the tool does (may be empty)."},
        "call_id": {"type": "string", "description": "The framework's id of the call."},
    },
    "required": ["name", "arguments"],
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _param(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema or _STR}


_QUESTION = {
    "type": "object",
    "properties": {
        "identity": _STR,
        "key": _STR,
        "question_id": {"type": "string", "description": "What an answer must name."},
        "prompt": _STR,
        "run_id": _STR,
        "asked_at": _TIME,
        "deadline": _TIME,
        "labels": _LABELS,
        "decisions": {
            "type": "array",
            "items": _DECISION,
            "description": "The decisions an answer may make; [respond] is a free-text answer only.",
        },
        "choices": {"type": "array", "items": _DECISION, "description": "The same as decisions (kept for clients)."},
        "tool": _TOOL,
        "answered": {"type": "boolean"},
        "answered_by": {"type": ["string", "null"]},
        "answered_at": _TIME,
        "expired": {
            "type": "boolean",
            "description": "The deadline has passed: its run never resumes, and an answer is refused (410).",
        },
    },
    "required": ["key", "question_id", "prompt", "run_id", "asked_at", "deadline", "labels", "decisions", "tool"],
}
_ANSWER = {
    "type": "object",
    "properties": {
        "identity": _STR,
        "key": _STR,
        "question_id": _STR,
        "decision": _DECISION,
        "text": _STR,
        "arguments": {**_OBJECT, "type": ["object", "null"], "description": "The new arguments of an edit."},
        "by": {"type": "string", "description": "The authenticated person who answered."},
        "answered_at": _TIME,
    },
}
_RUN = {
    "type": "object",
    "properties": {
        "identity": _STR,
        "key": _STR,
        "run_id": _STR,
        "created_at": _TIME,
        "deadline": _TIME,
        "size": {"type": "integer"},
        "labels": _LABELS,
        "sealed_by": _STR,
    },
}
_PAGING = [
    _param("offset", "Skip this many.", {"type": "integer", "minimum": 0}),
    _param("limit", "At most this many (1-1000, default 100).", {"type": "integer", "minimum": 1, "maximum": 1000}),
    _param("identity", "Only this identity (default: all for questions, the first for runs)."),
    _param("prefix", "Only keys starting with this."),
]
_UNAUTHORIZED = _json(_ERROR, "No valid bearer token or trusted header.")

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "berth inbox",
        "version": "1",
        "description": "Questions parked runs wait on, and the answers people give. Headers only: never sealed state.",
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "BERTH_SERVE_TOKEN"}},
    },
    "security": [{"bearer": []}],
    "paths": {
        "/api/questions": {
            "get": {
                "summary": "Open questions, newest first",
                "parameters": [
                    *_PAGING,
                    _param("label", "Only questions whose run has this label, as name=value (repeatable)."),
                    _param("sort", "newest (the default) or deadline: the nearest deadline first, none last."),
                ],
                "responses": {
                    "200": _json(
                        {"type": "array", "items": _QUESTION},
                        "A page of questions; header Link rel=next names the next page, X-Total-Count the total.",
                    ),
                    "401": _UNAUTHORIZED,
                },
            }
        },
        "/api/answers": {
            "post": {
                "summary": "Answer a question, bound to the question id the person saw",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "key": _STR,
                                    "question_id": _STR,
                                    "decision": {
                                        **_DECISION,
                                        "description": "One of the question's decisions. Without it, text is "
                                        "the answer: free text to an approval question never approves (exactly "
                                        "'approve' or 'yes' does; other text is a response or a rejection).",
                                    },
                                    "text": {
                                        "type": "string",
                                        "description": "The answer; with a decision, its reason, note or response.",
                                    },
                                    "arguments": {**_OBJECT, "description": "With edit only: the new arguments."},
                                    "identity": {"type": "string", "description": "Default: the first served."},
                                },
                                "required": ["key", "question_id"],
                            }
                        }
                    },
                },
                "responses": {
                    "201": _json(_ANSWER, "Recorded."),
                    "400": _json(
                        _ERROR,
                        "Malformed request or key, an unknown decision or one the question does not accept, or "
                        "edit arguments that are not a JSON object. Nothing was recorded.",
                    ),
                    "401": _UNAUTHORIZED,
                    "404": _json(_ERROR, "Nothing is pending at the key."),
                    "409": _json(
                        {**_ERROR, "properties": {"error": _STR, "question": _QUESTION}},
                        "Superseded (the body holds the new question) or already answered.",
                    ),
                    "410": _json(
                        {**_ERROR, "properties": {"error": _STR, "question": _QUESTION}},
                        "The question's deadline has passed: its run never resumes, nothing was recorded.",
                    ),
                    "415": _json(_ERROR, "Not application/json."),
                },
            }
        },
        "/api/runs": {
            "get": {
                "summary": "Parked runs (cleartext headers only), in backend order",
                "parameters": _PAGING,
                "responses": {"200": _json({"type": "array", "items": _RUN}, "A page of runs."), "401": _UNAUTHORIZED},
            }
        },
        "/health": {
            "get": {
                "summary": "Health: whether the stores can be listed",
                "security": [],
                "responses": {
                    "200": _json(
                        {"type": "object"}, 'The server is up and its stores listed recently: {"status": "ok"}.'
                    ),
                    "503": _json(
                        {"type": "object"},
                        'The stores cannot be listed now: {"status": "unavailable", "error": "<what failed>"}.',
                    ),
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus text format",
                "responses": {"200": {"description": "Metrics.", "content": {"text/plain": {}}}, "401": _UNAUTHORIZED},
            }
        },
    },
}
