"""The LLM judge: a model that scores a response (rubric) or prefers one of two (pairwise).

A judgment is one chat request built from a template and parsed *strictly*: the reply's last
non-empty line must be exactly ``VERDICT: A`` / ``VERDICT: B`` (pairwise) or ``SCORE: n`` with
``score_min ≤ n ≤ score_max`` (rubric), and no earlier line may carry a verdict of its own.
Anything else is a parse failure. A parse failure or a transport error draws a fresh sample
(``max_retries`` times, at temperature max(T, 1)); a judgment that never parsed is ``None``
and counted, never a silent 0 or 1: callers drop it.

With ``constrained`` the reply is decoded under a regular expression that admits exactly the
verdict line (:func:`verdict_regex`: the engine's structured output, e.g. vLLM's guided
decoding): a small judge then always answers in format, and which verdict it gives is still its
own. The reply is parsed the same strict way.

Pairwise judgments control position bias by judging both orders, (x, y) as (A, B) and as
(B, A): ``preference`` = 1.0 when both say x is better, 0.0 when both say y, 0.5 when the two
orders disagree (counted in ``judge/position_disagreements``); None when either order never
parsed. Rubric judgments give the parsed score.

Templates are ``str.format`` text with named fields: ``{prompt}``, ``{response_a}``,
``{response_b}`` (pairwise) or ``{prompt}``, ``{response}``, ``{score_min}``, ``{score_max}``
(rubric), plus the template's own fields (``judge.template_fields``). A field that nothing fills,
or a template without its mode's response fields, is a ValueError when the judge is built.

Backends: :class:`EngineBackend` (dockyard's own generation engines: a judge fleet of vLLM engine
actors from :func:`~dockyard.train.runtime.judge_fleet.start_judge_fleet`, or an engine object in this process) and
:class:`OpenAIBackend` (any ``/v1/chat/completions`` server; the key from an environment
variable). Metrics (:meth:`Judge.metrics`): ``judge/requests``, ``judge/parse_failures``
(replies that did not parse, retried or not), ``judge/retries``, ``judge/errors`` (transport
errors), ``judge/failed`` (judgments masked), ``judge/position_disagreements``.
"""

from __future__ import annotations

import asyncio
import os
import re
import string
import threading
from collections import Counter
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import httpx

from dockyard.core.interfaces import SamplingParams
from dockyard.train.prompts import PromptRenderer

if TYPE_CHECKING:
    from dockyard.core.config.judge import JudgeConfig

T = TypeVar("T")
Messages = list[dict[str, str]]

PAIRWISE_TEMPLATE = """\
Compare two responses to the same prompt and decide which one is better.

[Prompt]
{prompt}

[Response A]
{response_a}

[Response B]
{response_b}

Answer with one final line, exactly `VERDICT: A` or `VERDICT: B`."""

RUBRIC_TEMPLATE = """\
Rate the response to the prompt on a scale from {score_min} to {score_max} (higher is better).

[Prompt]
{prompt}

[Response]
{response}

Answer with one final line, exactly `SCORE: n` with n an integer from {score_min} to \
{score_max}."""

BUILT_IN = {"pairwise": PAIRWISE_TEMPLATE, "rubric": RUBRIC_TEMPLATE}
FILLED = {
    "pairwise": ("prompt", "response_a", "response_b"),
    "rubric": ("prompt", "response", "score_min", "score_max"),
}
"""The fields the judge fills itself, per mode."""
REQUIRED = {"pairwise": ("response_a", "response_b"), "rubric": ("response",)}

_VERDICT = re.compile(r"VERDICT: (A|B)")
_SCORE = re.compile(r"SCORE: (-?\d+)")
_ANY_VERDICT = re.compile(r"^\s*(VERDICT|SCORE)\s*:", re.IGNORECASE)


def verdict_regex(mode: str, lo: int = 1, hi: int = 10) -> str:
    """The regular expression a ``constrained`` judge's whole reply must match: ``VERDICT: (A|B)``
    (pairwise) or ``SCORE: (lo|…|hi)`` (rubric, every integer of the scale)."""
    if mode == "pairwise":
        return "VERDICT: (A|B)"
    return "SCORE: (" + "|".join(str(n) for n in range(lo, hi + 1)) + ")"


class ParseError(ValueError):
    """A judge reply that is not exactly one verdict in the required format."""


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        raise ParseError("empty reply")
    if any(_ANY_VERDICT.match(ln) for ln in lines[:-1]):
        raise ParseError("a verdict before the last line")
    return lines[-1]


def parse_verdict(text: str) -> Literal["A", "B"]:
    """``"A"`` or ``"B"`` from a reply whose last non-empty line is exactly ``VERDICT: A`` or
    ``VERDICT: B``; ParseError otherwise (no verdict, another letter, lower case, extra text on
    the line, a verdict on an earlier line too)."""
    m = _VERDICT.fullmatch(_last_line(text))
    if m is None:
        raise ParseError("the last line is not exactly 'VERDICT: A' or 'VERDICT: B'")
    return "A" if m.group(1) == "A" else "B"


def parse_score(text: str, lo: int, hi: int) -> int:
    """The integer ``n`` of a reply whose last non-empty line is exactly ``SCORE: n`` with
    ``lo ≤ n ≤ hi``; ParseError otherwise."""
    m = _SCORE.fullmatch(_last_line(text))
    if m is None:
        raise ParseError("the last line is not exactly 'SCORE: n'")
    n = int(m.group(1))
    if not lo <= n <= hi:
        raise ParseError(f"score {n} is outside [{lo}, {hi}]")
    return n


def template_fields(template: str) -> set[str]:
    """The named fields of a ``str.format`` template (ValueError for positional ``{}``)."""
    names = set()
    for _, name, _, _ in string.Formatter().parse(template):
        if name is None:
            continue
        if not name or name.isdigit():
            raise ValueError("a judge template names its fields: {prompt}, not {} or {0}")
        names.add(name.split(".")[0].split("[")[0])
    return names


def check_template(template: str, mode: str, fields: dict[str, str], where: str) -> None:
    """ValueError naming ``where`` when ``template`` lacks its mode's response fields or names a
    field neither the judge nor ``fields`` fills."""
    if taken := sorted(set(fields) & set(FILLED[mode])):
        raise ValueError(
            f"{where}: judge.template_fields {', '.join(taken)}: the judge fills those itself"
        )
    names = template_fields(template)
    if missing := [f for f in REQUIRED[mode] if f not in names]:
        raise ValueError(
            f"{where}: a {mode} template must contain {', '.join('{' + f + '}' for f in missing)}"
        )
    if unfilled := sorted(names - set(FILLED[mode]) - set(fields)):
        raise ValueError(
            f"{where}: the template's field(s) {', '.join(unfilled)} have no value: add them to "
            "judge.template_fields (or remove them from the template)"
        )


# --------------------------------------------------------------------------- backends
class Backend(Protocol):
    """Where a judge's requests go: one chat completion's text per call (``regex``: the reply
    must match it in full; passed only to a backend whose ``constrains`` is true)."""

    constrains: bool

    async def complete(
        self, messages: Messages, temperature: float, max_tokens: int, regex: str | None = None
    ) -> str: ...


class EngineBackend:
    """dockyard's own generation engines: each item of ``engines`` is a
    :class:`~dockyard.core.interfaces.GenerationEngine` in this process (started in the
    judge's event loop: :meth:`Judge.run`) or an ``EngineHost`` actor handle (a judge fleet);
    requests go round-robin. ``tokenizer`` renders the chat (the judge model's template)."""

    constrains = True

    def __init__(self, engines: Sequence[Any], tokenizer: Any) -> None:
        if not engines:
            raise ValueError("EngineBackend needs at least one engine")
        self.engines = list(engines)
        self.renderer = PromptRenderer.wrap(tokenizer)
        self._next = 0

    async def complete(
        self, messages: Messages, temperature: float, max_tokens: int, regex: str | None = None
    ) -> str:
        engine = self.engines[self._next % len(self.engines)]
        self._next += 1
        ids = self.renderer.prompt_ids(messages)
        params = SamplingParams(n=1, max_tokens=max_tokens, temperature=temperature, regex=regex)
        remote = getattr(getattr(engine, "generate", None), "remote", None)
        out = await (remote(ids, params) if remote else engine.generate(ids, params))
        return str(out[0].text)


class OpenAIBackend:
    """Any OpenAI-compatible server (``base_url`` ends with ``/v1``): ``POST
    /chat/completions``, through the ``openai`` client when installed, else httpx. The API key
    is read from the environment variable ``api_key_env`` (None: no key). It does not constrain
    replies (servers differ in how they take a grammar)."""

    constrains = False

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        key = None
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise ValueError(
                    f"judge.api_key_env: the environment variable {api_key_env!r} is not set "
                    "(export it with the API key, or set judge.api_key_env: null)"
                )
        self.base_url, self.model, self.key = base_url.rstrip("/"), model, key
        self.timeout_s = timeout_s
        self._client: Any = None

    def _openai(self) -> Any:
        if self._client is None:
            try:
                import openai  # lazy: openai is optional (not a dependency; httpx otherwise)
            except ImportError:
                self._client = False
            else:
                self._client = openai.AsyncOpenAI(
                    base_url=self.base_url,
                    api_key=self.key or "EMPTY",
                    timeout=self.timeout_s,
                    max_retries=0,  # the judge retries (and counts it)
                )
        return self._client

    async def complete(
        self, messages: Messages, temperature: float, max_tokens: int, regex: str | None = None
    ) -> str:
        if regex is not None:
            raise ValueError("OpenAIBackend does not constrain replies (judge.constrained)")
        body = {"model": self.model, "messages": messages, "temperature": temperature,
                "max_tokens": max_tokens}  # fmt: skip
        client = self._openai()
        if client:
            reply = await client.chat.completions.create(**body)
            return str(reply.choices[0].message.content or "")
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        async with httpx.AsyncClient(timeout=self.timeout_s) as http:
            r = await http.post(f"{self.base_url}/chat/completions", json=body, headers=headers)
            r.raise_for_status()
            return str(r.json()["choices"][0]["message"]["content"] or "")


# --------------------------------------------------------------------------- the judge
@dataclass
class PairJudgment:
    """``preference``: 1.0 first better, 0.0 second better, 0.5 the orders disagreed, None
    masked (an order never parsed); ``verdicts``: each order's parsed verdict (None: failed)."""

    preference: float | None
    verdicts: tuple[str | None, ...]


class Judge:
    """See the module docstring. ``template``: None for the mode's built-in; ``fields``: the
    template's own named fields. Calls made from synchronous code run on the judge's own event
    loop (a background thread: :meth:`run`), where engines in this process also live."""

    def __init__(
        self,
        backend: Backend,
        *,
        mode: Literal["pairwise", "rubric"] = "pairwise",
        template: str | None = None,
        fields: dict[str, str] | None = None,
        score_range: tuple[int, int] = (1, 10),
        both_orders: bool = True,
        max_retries: int = 2,
        temperature: float = 0.0,
        max_tokens: int = 64,
        max_concurrency: int = 32,
        timeout_s: float = 60.0,
        constrained: bool = False,
    ) -> None:
        if mode not in BUILT_IN:
            raise ValueError(f"judge mode {mode!r}: expected 'pairwise' or 'rubric'")
        if constrained and not getattr(backend, "constrains", False):
            raise ValueError(
                f"judge.constrained: the {type(backend).__name__} backend cannot constrain replies "
                "(backend 'engine' can: dockyard's vLLM judge fleet)"
            )
        self.regex = verdict_regex(mode, *score_range) if constrained else None
        self.template = BUILT_IN[mode] if template is None else template
        self.fields = dict(fields or {})
        check_template(self.template, mode, self.fields, "judge template")
        self.backend, self.mode = backend, mode
        self.score_range = score_range
        self.both_orders, self.max_retries = both_orders, max_retries
        self.temperature, self.max_tokens = temperature, max_tokens
        self.max_concurrency, self.timeout_s = max_concurrency, timeout_s
        self.counts: Counter[str] = Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread()
        self._sem: asyncio.Semaphore | None = None

    @classmethod
    def from_config(cls, judge_cfg: JudgeConfig, backend: Backend) -> Judge:
        """From ``judge`` of a ``MasterConfig`` (the template file read here)."""
        template = None
        if judge_cfg.template_file:
            path = Path(judge_cfg.template_file)
            if not path.is_file():
                raise FileNotFoundError(f"judge.template_file: no file {str(path)!r}")
            template = path.read_text()
        return cls(
            backend,
            mode=judge_cfg.mode,
            template=template,
            fields=judge_cfg.template_fields,
            score_range=(judge_cfg.score_min, judge_cfg.score_max),
            both_orders=judge_cfg.both_orders,
            max_retries=judge_cfg.max_retries,
            temperature=judge_cfg.temperature,
            max_tokens=judge_cfg.max_tokens,
            max_concurrency=judge_cfg.max_concurrency,
            timeout_s=judge_cfg.timeout_s,
            constrained=judge_cfg.constrained,
        )

    # ------------------------------------------------------------ the event loop
    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the judge's event loop (started on first use) and wait for it."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=self._loop.run_forever, name="judge", daemon=True
            )
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        """Stop and close the judge's event loop (engines in this process: shut them down
        first, through :meth:`run`)."""
        loop, self._loop, self._sem = self._loop, None, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(10)
            loop.close()

    # ------------------------------------------------------------ one judgment
    def _messages(self, values: dict[str, Any]) -> Messages:
        return [{"role": "user", "content": self.template.format(**self.fields, **values)}]

    async def _judged(self, values: dict[str, Any], parse: Any) -> Any:
        """``parse(reply)`` of the first reply that parses (None after ``max_retries`` fresh
        samples), counting requests, parse failures, retries and errors."""
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.max_concurrency)
        messages = self._messages(values)
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.counts["retries"] += 1
            temperature = self.temperature if attempt == 0 else max(self.temperature, 1.0)
            self.counts["requests"] += 1
            try:
                request = (messages, temperature, self.max_tokens)
                async with self._sem:
                    text = await asyncio.wait_for(
                        self.backend.complete(*request, regex=self.regex)
                        if self.regex
                        else self.backend.complete(*request),
                        self.timeout_s,
                    )
            except Exception:  # a transport error or a timeout: a fresh request
                self.counts["errors"] += 1
                continue
            try:
                return parse(text)
            except ParseError:
                self.counts["parse_failures"] += 1
        self.counts["failed"] += 1
        return None

    async def ascore(self, prompt: str, response: str) -> int | None:
        """The rubric score of ``response`` (None: masked)."""
        lo, hi = self.score_range
        values = {"prompt": prompt, "response": response, "score_min": lo, "score_max": hi}
        return await self._judged(values, lambda t: parse_score(t, lo, hi))

    async def acompare(self, prompt: str, first: str, second: str) -> PairJudgment:
        """Which of ``first`` / ``second`` is better (see :class:`PairJudgment`)."""
        orders = [(first, second), (second, first)] if self.both_orders else [(first, second)]
        verdicts = await asyncio.gather(
            *(
                self._judged({"prompt": prompt, "response_a": a, "response_b": b}, parse_verdict)
                for a, b in orders
            )
        )
        if any(v is None for v in verdicts):
            return PairJudgment(None, tuple(verdicts))
        # "first is better" in each order: A in the first, B in the swapped one
        wins = [v == ("A" if i == 0 else "B") for i, v in enumerate(verdicts)]
        if len(wins) == 2 and wins[0] != wins[1]:
            self.counts["position_disagreements"] += 1
            return PairJudgment(0.5, tuple(verdicts))
        return PairJudgment(1.0 if wins[0] else 0.0, tuple(verdicts))

    # ------------------------------------------------------------ many at once
    def scores(self, items: Sequence[tuple[str, str]]) -> list[int | None]:
        """Rubric scores of ``(prompt, response)`` items, concurrently."""
        self._need("rubric")

        async def go() -> list[int | None]:
            return list(await asyncio.gather(*(self.ascore(p, r) for p, r in items)))

        return self.run(go())

    def compare(self, items: Sequence[tuple[str, str, str]]) -> list[PairJudgment]:
        """Pairwise judgments of ``(prompt, first, second)`` items, concurrently."""
        self._need("pairwise")

        async def go() -> list[PairJudgment]:
            return list(await asyncio.gather(*(self.acompare(p, a, b) for p, a, b in items)))

        return self.run(go())

    def _need(self, mode: str) -> None:
        if self.mode != mode:
            raise ValueError(
                f"this is a {self.mode} judge; a {mode} judge is built with mode={mode!r}"
            )

    def metrics(self, reset: bool = True) -> dict[str, float]:
        """``judge/*`` counts since the last reset (every key, 0 included)."""
        keys = ("requests", "parse_failures", "retries", "errors", "failed",
                "position_disagreements")  # fmt: skip
        out = {f"judge/{k}": float(self.counts[k]) for k in keys}
        if reset:
            self.counts.clear()
        return out


def backend_from_config(judge_cfg: JudgeConfig, engines: Sequence[Any] | None = None) -> Backend:
    """The backend ``judge`` names: an :class:`OpenAIBackend` for ``openai``; for ``engine``
    an :class:`EngineBackend` over ``engines`` (a judge fleet's actors) with the judge model's
    tokenizer."""
    if judge_cfg.backend == "openai":
        if not judge_cfg.base_url or not judge_cfg.model_name:
            raise ValueError("judge.base_url and judge.model_name: backend 'openai' needs both")
        return OpenAIBackend(judge_cfg.base_url, judge_cfg.model_name,
                             api_key_env=judge_cfg.api_key_env, timeout_s=judge_cfg.timeout_s)  # fmt: skip
    if not judge_cfg.model_name or engines is None:
        raise ValueError("judge.model_name: backend 'engine' needs the judge model (and its fleet)")
    from transformers import AutoTokenizer  # lazy: transformers is optional (torch extra)

    return EngineBackend(engines, AutoTokenizer.from_pretrained(judge_cfg.model_name))


def judge_fn(judge: Judge) -> Any:
    """A :data:`dockyard.envs.judging.JudgeFn` over a rubric ``judge``, for an environment that
    ``needs_judge``: ``await fn(prompt, response)`` is the score n mapped to
    ``(n − score_min) / (score_max − score_min)`` ∈ [0, 1], or None when the judgment failed
    (counted in ``judge/failed``; the environment masks the sample). It runs in the caller's
    event loop (the collector actor's)."""
    judge._need("rubric")
    lo, hi = judge.score_range

    async def fn(prompt: str, response: str) -> float | None:
        n = await judge.ascore(prompt, response)
        return None if n is None else (n - lo) / (hi - lo)

    fn.judge = judge  # type: ignore[attr-defined]  # its metrics(), for whoever reports them
    return fn


def env_judge(judge_cfg: JudgeConfig, engines: Sequence[Any] | None = None) -> Any:
    """The :func:`judge_fn` an environment that ``needs_judge`` gets from the runtime, built
    from the ``judge`` section (``engines``: a judge fleet's actors for backend ``engine``).
    ValueError with the keys to set when the section cannot grade (no model or URL, or a
    pairwise judge)."""
    if judge_cfg.mode != "rubric":
        raise ValueError(
            "judge.mode: an environment graded by the judge asks for scores: set judge.mode: "
            "rubric (a pairwise judge answers VERDICT lines, never SCORE)"
        )
    if judge_cfg.backend == "engine" and not engines:
        raise ValueError(
            "judge: backend 'engine' needs its judge fleet (judge.model_name) started by the "
            "runtime; or use backend 'openai' with judge.base_url"
        )
    return judge_fn(Judge.from_config(judge_cfg, backend_from_config(judge_cfg, engines)))
