"""/parse_function_call and /separate_reasoning: the chat route's output parsers, offered on their
own (as SGLang does) for clients that generate through /generate and parse afterwards.

The parser is named per request here, so one server can read any format.
"""

from __future__ import annotations

from typing import List, Optional

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sglang.srt.entrypoints.errors import ApiError, error_response, to_api_error
from sglang.srt.entrypoints.openai.protocol import MAX_TOOLS, Tool
from sglang.srt.entrypoints.openapi_docs import route_doc
from sglang.srt.entrypoints.server_state import ServerState, json_response, read_json
from sglang.srt.parsers.reasoning_parser import STYLES, separate_reasoning
from sglang.srt.parsers.tool_call_parser import parse_tool_calls
from sglang.srt.parsers.tool_formats import resolve_format
from sglang.srt.server_args import REASONING_PARSERS, TOOL_CALL_PARSERS


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class ParseFunctionCallBody(_Body):
    text: str
    tools: List[Tool] = Field(default_factory=list, max_length=MAX_TOOLS)
    tool_call_parser: Optional[str] = None  # the server's --tool-call-parser when unset


class SeparateReasoningBody(_Body):
    text: str
    reasoning_parser: Optional[str] = None  # the server's --reasoning-parser when unset


def _parser_name(
    requested: Optional[str], server_default: Optional[str], choices: List[str], field: str
) -> str:
    """The request's parser, else the server's flag; a name outside the choices is a 400."""
    name = requested or server_default
    if name not in choices:
        raise ApiError(400, f"{field} must be one of {choices}", field)
    return name


def add_parser_routes(app: FastAPI, state: ServerState) -> None:
    @app.post("/parse_function_call", openapi_extra=route_doc(ParseFunctionCallBody))
    async def parse_function_call(request: Request) -> Response:
        try:
            body = ParseFunctionCallBody.model_validate(await read_json(request))
            name = _parser_name(
                body.tool_call_parser,
                state.server_args.tool_call_parser,
                TOOL_CALL_PARSERS,
                "tool_call_parser",
            )
            tok = state.tm.tokenizer
            fmt = resolve_format(name, getattr(tok, "chat_template", None) if tok else None)
            names = [t.function.name for t in body.tools] if body.tools else None
            content, calls = parse_tool_calls(body.text, fmt, names)
        except (ApiError, ValidationError, ValueError) as e:
            return error_response(to_api_error(e))
        index = {t.function.name: i for i, t in enumerate(body.tools)}
        return json_response(
            {
                "normal_text": content,
                "calls": [
                    {"tool_index": index.get(c.name, -1), "name": c.name, "parameters": c.arguments}
                    for c in calls
                ],
            }
        )

    @app.post("/separate_reasoning", openapi_extra=route_doc(SeparateReasoningBody))
    async def separate_reasoning_route(request: Request) -> Response:
        try:
            body = SeparateReasoningBody.model_validate(await read_json(request))
            name = _parser_name(
                body.reasoning_parser,
                state.server_args.reasoning_parser,
                REASONING_PARSERS,
                "reasoning_parser",
            )
            style = STYLES[name]
            reasoning, content = separate_reasoning(body.text, style, style.starts_in_reasoning)
        except (ApiError, ValidationError, ValueError) as e:
            return error_response(to_api_error(e))
        return json_response({"text": content, "reasoning_text": reasoning})
