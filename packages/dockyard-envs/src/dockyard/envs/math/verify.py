"""Check a mathematical answer with math-verify, under a hard timeout.

math-verify's own timeouts use ``SIGALRM``, which Python allows only in the main thread; an
environment inside a Ray actor (or any worker thread) runs elsewhere. So:

* on the main thread, math-verify's signal-based timeout is used (cheap);
* on any other thread, the check runs in a one-process pool with math-verify's signals off; on
  timeout the pool is killed and replaced, so a pathological expression costs at most
  ``timeout_s`` and never wedges the actor. The pool *forks* (after importing math-verify here)
  so the child starts with sympy loaded: a fresh interpreter pays seconds to import it. A child
  that deadlocks on a lock inherited from another thread is just another timeout: killed and
  replaced.

Two plain decimal numbers (``355``, ``-0.5``, ``3.140``) are compared exactly first, without
math-verify: it would give the same verdict, at 20-30 ms of sympy per check in the caller's
thread (a collector's event loop scoring a step's 64 answers).

A timeout is *not* an infrastructure failure: the answer could not be shown equal, so it scores
0, and ``timed_out`` is reported for the metrics.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing as mp
import re
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction


@dataclass
class Verdict:
    correct: bool
    timed_out: bool = False
    error: str | None = None


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _plain_numbers_equal(gold: str, pred: str) -> bool | None:
    """Exact equality of two plain decimal numbers; None when either is anything else."""
    gold, pred = gold.strip(), pred.strip()
    if not (_NUMBER.fullmatch(gold) and _NUMBER.fullmatch(pred)):
        return None
    return Fraction(gold) == Fraction(pred)


def _wrap(s: str) -> str:
    s = s.strip()
    if s.startswith("$") and s.endswith("$"):
        s = s.strip("$")
    return "\\boxed{" + s + "}"


def _check(gold: str, pred: str, timeout: int | None) -> bool:
    # lazy: math_verify (sympy) takes 0.4 s to import; plain numbers never need it
    from math_verify import parse, verify

    g = parse(_wrap(gold), parsing_timeout=timeout)  # type: ignore[arg-type]
    p = parse(_wrap(pred), parsing_timeout=timeout)  # type: ignore[arg-type]
    if not g or not p:
        return gold.strip() == pred.strip()
    return bool(verify(g, p, timeout_seconds=timeout))


def _check_in_worker(gold: str, pred: str) -> bool:
    # signals are off here on purpose (the parent enforces the budget): silence the reminder
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    return _check(gold, pred, None)


def _with_alarm(fn: Callable[[str, str], bool], gold: str, pred: str, timeout_s: float) -> bool:
    """Run ``fn`` on the main thread under a SIGALRM budget (math-verify's TimeoutException)."""
    # lazy: math_verify (sympy) takes 0.4 s to import; plain numbers never need it
    from math_verify.errors import TimeoutException

    def handler(signum: int, frame: object) -> None:
        raise TimeoutException("check timed out")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        return fn(gold, pred)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class MathVerifier:
    """``MathVerifier(timeout_s=5).check(gold, pred) -> Verdict``; thread- and actor-safe.

    Args:
        timeout_s: the budget of one check.
        check_fn: a custom checker ``(gold, pred) -> bool`` given the same protection (a
            module-level function: off the main thread it runs in the worker process).
    """

    def __init__(
        self, timeout_s: float = 5.0, check_fn: Callable[[str, str], bool] | None = None
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"math verifier timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = timeout_s
        self.check_fn = check_fn
        self._pool: cf.ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def check(self, gold: str, pred: str | None) -> Verdict:
        if pred is None or not pred.strip():
            return Verdict(False)
        if self.check_fn is None and (same := _plain_numbers_equal(gold, pred)) is not None:
            return Verdict(same)
        if threading.current_thread() is threading.main_thread():
            # lazy: math_verify (sympy) takes 0.4 s to import; plain numbers never need it
            from math_verify.errors import TimeoutException

            try:
                if self.check_fn is not None:
                    return Verdict(bool(_with_alarm(self.check_fn, gold, pred, self.timeout_s)))
                return Verdict(_check(gold, pred, max(1, round(self.timeout_s))))
            except TimeoutException:
                return Verdict(False, timed_out=True)
            except Exception as e:
                return Verdict(False, error=f"{type(e).__name__}: {e}")
        return self._check_off_main(gold, pred)

    def _check_off_main(self, gold: str, pred: str) -> Verdict:
        with self._lock:
            if self._pool is None:
                # lazy: imported once, before the fork, so the worker inherits it (0.4 s, sympy)
                import math_verify  # noqa: F401

                pool = cf.ProcessPoolExecutor(1, mp_context=mp.get_context("fork"))
                # warm up outside the per-check budget
                pool.submit(_check_in_worker, "1", "1").result(timeout=120)
                self._pool = pool
            pool = self._pool
        fut = pool.submit(self.check_fn or _check_in_worker, gold, pred)
        try:
            return Verdict(bool(fut.result(timeout=self.timeout_s)))
        except cf.TimeoutError:
            self._kill(pool)
            return Verdict(False, timed_out=True)
        except cf.process.BrokenProcessPool as e:
            self._kill(pool)
            return Verdict(False, error=f"verifier process died: {e}")
        except Exception as e:
            return Verdict(False, error=f"{type(e).__name__}: {e}")

    def _kill(self, pool: cf.ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        for p in list(getattr(pool, "_processes", {}).values()):
            p.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        if self._pool is not None:
            self._kill(self._pool)
