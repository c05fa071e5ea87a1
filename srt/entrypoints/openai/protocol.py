"""Request bodies of the OpenAI-compatible routes, as pydantic models.

Validation is strict (no "2" for 2, no true for 1, no NaN): a wrong type is a 400 naming the field,
never a silent coercion. Unknown fields are ignored, as OpenAI clients send extras (`user`,
`metadata`...) that mean nothing here. Fields the OpenAI API lacks (top_k, regex, ...) are the
runtime's own sampling knobs; the openai client sends them through `extra_body`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

# OpenAI documents at most 20 alternatives per position.
MAX_TOP_LOGPROBS = 20


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True)


class StreamOptions(_Body):
    include_usage: bool = False


class JsonSchemaFormat(_Body):
    name: Optional[str] = None
    description: Optional[str] = None
    # `schema` would shadow a BaseModel attribute, hence the alias.
    schema_: Optional[Dict[str, Any]] = Field(None, alias="schema")
    strict: Optional[bool] = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaFormat] = None


class SamplingFields(_Body):
    """Fields shared by /v1/completions and /v1/chat/completions."""

    model: Optional[str] = None
    n: int = Field(1, ge=1, le=128)
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    stop: Optional[Union[str, List[str]]] = None
    temperature: Optional[float] = Field(None, ge=0.0, allow_inf_nan=False)
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0, allow_inf_nan=False)
    seed: Optional[int] = None
    frequency_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0, allow_inf_nan=False)
    presence_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0, allow_inf_nan=False)
    logit_bias: Optional[Dict[str, float]] = None
    response_format: Optional[ResponseFormat] = None
    user: Optional[str] = None
    # Runtime extras.
    top_k: Optional[int] = None
    min_p: Optional[float] = Field(None, allow_inf_nan=False)
    repetition_penalty: Optional[float] = Field(None, allow_inf_nan=False)
    min_tokens: int = Field(0, ge=0)
    ignore_eos: bool = False
    stop_token_ids: Optional[List[int]] = None
    stop_regex: Optional[Union[str, List[str]]] = None
    no_stop_trim: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    regex: Optional[str] = None
    ebnf: Optional[str] = None
    json_schema: Optional[Union[str, Dict[str, Any]]] = None
    structural_tag: Optional[Union[str, Dict[str, Any]]] = None

    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


class CompletionRequest(SamplingFields):
    prompt: Union[str, List[str], List[int], List[List[int]]]
    # OpenAI's default for the legacy completions route.
    max_tokens: Optional[int] = Field(16, ge=0)
    echo: bool = False
    logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    suffix: Optional[str] = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_shape(cls, v: Any) -> Any:
        # One clear message instead of one error per member of the union.
        if isinstance(v, str) or (
            isinstance(v, list)
            and (
                all(isinstance(x, str) for x in v)
                or all(_is_int(x) for x in v)
                or all(isinstance(x, list) and all(_is_int(t) for t in x) for x in v)
            )
        ):
            return v
        raise ValueError(
            "prompt must be a string, a list of strings, a list of token ids, or a list of token-id lists"
        )


class ContentPart(_Body):
    type: str
    text: Optional[str] = None


# OpenAI's rule for function names; templates and parsers rely on names being plain identifiers.
_FUNCTION_NAME = r"^[A-Za-z0-9_.\-]{1,64}$"
MAX_TOOLS = 256


class FunctionDefinition(_Body):
    name: str = Field(pattern=_FUNCTION_NAME)
    description: Optional[str] = None
    parameters: Optional[Dict[str, Any]] = None
    strict: Optional[bool] = None


class Tool(_Body):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Body):
    name: str


class NamedToolChoice(_Body):
    type: Literal["function"] = "function"
    function: NamedFunction


class ToolCallFunction(_Body):
    name: str
    # A JSON string, as OpenAI sends it back; some clients send the object itself.
    arguments: Optional[Union[str, Dict[str, Any]]] = None


class ToolCallItem(_Body):
    id: Optional[str] = None
    type: Literal["function"] = "function"
    function: ToolCallFunction
    index: Optional[int] = None


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Optional[Union[str, List[ContentPart]]] = None
    name: Optional[str] = None
    tool_calls: Optional[List[ToolCallItem]] = None
    tool_call_id: Optional[str] = None
    reasoning_content: Optional[str] = None


ToolChoiceOption = Union[Literal["none", "auto", "required"], NamedToolChoice]


class ChatCompletionRequest(SamplingFields):
    messages: List[ChatMessage] = Field(min_length=1)
    max_tokens: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: Optional[List[Tool]] = Field(None, max_length=MAX_TOOLS)
    tool_choice: Optional[ToolChoiceOption] = None
    parallel_tool_calls: bool = True
    functions: Optional[List[Any]] = None
    # SGLang's reasoning fields: split <think> text into reasoning_content (with --reasoning-parser),
    # and stream it as it comes or in one piece once the answer starts.
    separate_reasoning: bool = True
    stream_reasoning: bool = True
    # Extra variables for the chat template (enable_thinking=False for Qwen3, ...).
    chat_template_kwargs: Optional[Dict[str, Any]] = None

    @field_validator("functions")
    @classmethod
    def _no_legacy_functions(cls, v: Optional[List[Any]]) -> Optional[List[Any]]:
        if v:
            raise ValueError("the deprecated `functions` field is not supported; send `tools`")
        return v

    @field_validator("tools")
    @classmethod
    def _unique_names(cls, v: Optional[List[Tool]]) -> Optional[List[Tool]]:
        names = [t.function.name for t in v or []]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ValueError(f"two tools are named {dup!r}")
        return v

    def effective_tool_choice(self) -> Union[str, NamedToolChoice]:
        """OpenAI's default: `auto` when tools are offered, `none` otherwise."""
        if self.tool_choice is not None:
            return self.tool_choice
        return "auto" if self.tools else "none"

    def max_new_tokens(self) -> Optional[int]:
        # max_completion_tokens replaces the deprecated max_tokens; None runs to the context limit.
        return (
            self.max_completion_tokens
            if self.max_completion_tokens is not None
            else self.max_tokens
        )
