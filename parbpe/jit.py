"""The kernel seam: how numba kernels are declared, loaded and chosen, in one place.

numpy is the reference: every kernel names its numpy twin (`@kernel(twin=...)`), the twin test runs
each pair, and the numpy path runs wherever numba is missing or the mode is off. numba is a default
dependency where it has wheels, so the kernels run by default.

- The mode (auto, on, off) is read from PARBPE_JIT in `env_mode` alone; a run fixes it from its
  config (`set_mode`, a value in this process: parbpe never writes the environment), and worker
  processes and Ray tasks receive it in the config they are given.
- Whether a stage runs kernels is decided here, by the thresholds below (`worth`, `merge_kernels`, ...):
  under auto, a job too small to repay numba's start runs numpy.
- Kernels are compiled with numba's public API only: `numba.njit(cache=True, nogil=True)` on their
  first call, the helpers they call as `numba.njit(inline="always")` functions in the namespace the
  kernel is compiled in (the module's own names are left as they are). The first run
  after an install compiles them (shown on screen past a second, counted in stats.json); later runs
  load them from numba's cache. Where numba cannot cache (a read-only install with no writable home),
  they are cached in a directory of the system's temporary folder, or not at all, said in one line.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

MODES = ("auto", "on", "off")
ENV = "PARBPE_JIT"
INSTALL_HINT = "pip install 'numba>=0.65,<0.69'"
MISSING_LINE = f"numba is not installed: parbpe runs its numpy path, 2-6x slower ({INSTALL_HINT})"

# --- thresholds: every choice between a kernel and numpy is made from these -------------------------
NUMBA_RSS = 150 * 10**6  # the memory numba and its loaded kernels add to a process
NUMBA_COUNT_RSS = 200 * 10**6  # ... numba and the counting kernels (lexer, piece cutter), loaded before counting
MERGE_KERNELS_RSS = 64 * 10**6  # ... the merge's kernels, loaded (or compiled) where numba is already
MERGE_MIN_TOKENS = 1_500_000  # a chunk table from which the merge kernels repay numba's start
COUNT_MIN_BYTES = 64 * 10**6  # text from which the counting kernels repay it
SEGMENT_MIN_BYTES = 1 << 20  # chunk bytes from which segmentation (encode, eval) uses its kernels
SCORE_MIN_BYTES = 1 << 18  # chunk bytes from which PathPiece's scoring uses its kernel
SEARCH_MIN = 1 << 16  # entries of a packed pair block from which it is searched by kernel
RADIX_MIN = 1 << 14  # holding candidates from which the merge kernels radix-sort them (numpy below)

_mode: str | None = None  # this process's mode once a run fixed it (set_mode), else env_mode()
_numba: Any = None
_numba_checked = False
_lock = threading.RLock()  # numba's import and each kernel's dispatcher are made once
_preloading: dict[str, threading.Thread] = {}
_helpers: set[Callable] = set()  # declared with @helper
_namespaces: dict[str, dict] = {}  # a module's names as its kernels see them (_namespace)
_helper_dispatchers: dict[Callable, Any] = {}
KERNELS: dict[str, Kernel] = {}  # every kernel declared, by module and name (the twin test walks it)


class KernelsMissing(ValueError):
    """--jit on (PARBPE_JIT=on) where numba is not installed: a user's setting, one line."""


def env_mode() -> str:
    """The mode PARBPE_JIT asks for (auto when unset): the one place parbpe reads it."""
    return check_mode(os.environ.get(ENV, "auto").strip().lower() or "auto")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"--jit (PARBPE_JIT) must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


def mode() -> str:
    """This process's mode: the run's (set_mode) while one runs, else PARBPE_JIT's."""
    return _mode if _mode is not None else env_mode()


def set_mode(new_mode: str | None) -> None:
    """Fix this process's mode (None: PARBPE_JIT's again). A worker calls it with its config's mode."""
    global _mode
    if new_mode is not None:
        check_mode(new_mode)
        if new_mode == "on":
            require()
    _mode = new_mode


@contextlib.contextmanager
def using(new_mode: str) -> Iterator[None]:
    """This mode in this process for the duration (a run, or a stage that chose numpy); then as it was."""
    before = _mode
    set_mode(new_mode)
    try:
        yield
    finally:
        set_mode(before)


def require() -> None:
    """Raise KernelsMissing (one line with the install command) where numba is not installed."""
    if not installed():
        raise KernelsMissing(f"--jit on needs numba, which is not installed: {INSTALL_HINT}")


def installed() -> bool:
    """Whether numba can be imported, without importing it."""
    if _numba_checked:
        return _numba is not None
    return importlib.util.find_spec("numba") is not None


def loaded() -> bool:
    """Whether numba is imported in this process already (a kernel then costs no import)."""
    return _numba_checked and _numba is not None


def enabled() -> bool:
    """Whether kernels may run in this process: the mode is not off and numba is installed."""
    current = mode()
    if current == "on":
        require()
        return True
    return current == "auto" and installed()


def worth(work: int, at_least: int) -> bool:
    """Whether kernels run on `work` (bytes, tokens: the threshold's unit): always with --jit on,
    never off; under auto when numba is installed and work >= at_least (one of the thresholds above)."""
    return (mode() == "on" or work >= at_least) and enabled()


def warm() -> bool:
    """Whether kernels run at no cost of numba's start: --jit on, or auto with numba loaded already."""
    current = mode()
    if current == "on":
        require()
        return True
    return current == "auto" and loaded()


def merge_load_rss() -> int:
    """What loading the merge's kernels adds to this process: numba with them (NUMBA_RSS), or only
    them where numba is loaded already (its weight is then in the process's RSS)."""
    return MERGE_KERNELS_RSS if loaded() else NUMBA_RSS


def merge_kernels(n_tokens: int) -> bool:
    """Whether the merge stage (and the engines, encoders and cuts it calls) runs its kernels."""
    return worth(n_tokens, MERGE_MIN_TOKENS)


def score_kernels(chunk_bytes: int) -> bool:
    """Whether PathPiece's scoring (pathpiece/workers.py) runs its kernel on a table of chunk_bytes."""
    return worth(chunk_bytes, SCORE_MIN_BYTES)


def numpy_fallback_line() -> str | None:
    """The line a run prints when it takes the numpy path only because numba is missing (else None)."""
    return MISSING_LINE if mode() == "auto" and not installed() else None


# --- numba itself: imported once, with a cache it can write -----------------------------------------
def numba_module() -> Any:
    """numba, or None when it is not installed (imported once, on first use)."""
    global _numba, _numba_checked
    if not _numba_checked:
        with _lock:
            if not _numba_checked:
                _choose_cache_dir()
                try:
                    import numba
                except ImportError:
                    numba = None
                _numba = numba
                _numba_checked = True  # after _numba: another thread reads the flag without the lock
                if _cache_note and compiles.announce is not None:
                    compiles.announce(_cache_note[0])
    return _numba


_cache_note: list[str] = []  # what was said of numba's cache (at most one line)


def _choose_cache_dir() -> None:
    """Before numba's import: where neither NUMBA_CACHE_DIR, the package's directory nor the user's
    cache directory can be written (a read-only install, no writable home), have numba cache in the
    system's temporary folder, said in one line; numba reads NUMBA_CACHE_DIR when it is imported."""
    if os.environ.get("NUMBA_CACHE_DIR") or "numba" in sys.modules:
        return
    package = os.path.dirname(os.path.abspath(__file__))
    if _writable(os.path.join(package, "__pycache__")) or _writable(package):
        return
    user = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if _writable(user) or (not os.path.exists(user) and _writable(os.path.dirname(user))):
        return
    fallback = os.path.join(tempfile.gettempdir(), f"parbpe-numba-cache-{os.getuid() if hasattr(os, 'getuid') else 0}")
    try:
        os.makedirs(fallback, mode=0o700, exist_ok=True)
    except OSError:
        _cache_note.append("numba cannot cache parbpe's kernels here (no writable cache directory): they "
                           "are compiled in every run; set NUMBA_CACHE_DIR to a writable directory")
        return
    os.environ["NUMBA_CACHE_DIR"] = fallback
    _cache_note.append(f"neither parbpe's directory nor the home's cache is writable: numba caches kernels "
                       f"in {fallback} (set NUMBA_CACHE_DIR to choose)")


def _writable(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


# --- kernels and helpers ------------------------------------------------------------------------------
def helper(python: Callable) -> Callable:
    """Declare a function that kernels call: plain Python as it is; in a kernel, inlined into it
    (numba.njit(inline="always"): as a call per step of a hot loop it cost the merge stage most of
    its speed, and numba.extending.register_jitable's inlining compiles several times slower)."""
    _helpers.add(python)
    return python


def _namespace(module: str) -> dict:
    """The globals a kernel of `module` is compiled with: the module's names, each helper among them
    as its numba function. A copy: the module itself is left as it is. (Under _lock.)"""
    names = _namespaces.get(module)
    if names is None:
        names = _namespaces[module] = dict(vars(sys.modules[module]))
        for name, value in list(names.items()):
            if isinstance(value, types.FunctionType) and value in _helpers:
                names[name] = _helper_dispatcher(value)
    return names


def prefetch(array: Any, index: int) -> None:
    """Ask the CPU for array[index] (of a 2-D array: row index's first item) ahead of a read, without
    waiting for it: in a kernel, LLVM's prefetch instruction; in Python, nothing. For loops over
    positions known ahead whose rows lie far apart in an array far larger than the caches."""


_helpers.add(prefetch)


def _numba_prefetch() -> Any:
    """prefetch in numba: the address of array's row `index` handed to llvm.prefetch, declared
    through llvmlite's declare_intrinsic (which spells the name for the LLVM in use)."""
    from llvmlite import ir
    from numba import types as nb_types
    from numba.extending import intrinsic

    @intrinsic
    def prefetch_address(typingctx, address):
        if not isinstance(address, nb_types.Integer):
            return None

        def codegen(context, builder, signature, args):
            byte_pointer, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
            llvm_prefetch = builder.module.declare_intrinsic(
                "llvm.prefetch", [byte_pointer], ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]))
            builder.call(llvm_prefetch, [builder.inttoptr(args[0], byte_pointer), i32(0), i32(3), i32(1)])
            return context.get_dummy_value()  # (read, keep in every cache level, data)

        return nb_types.void(address), codegen

    def in_kernel(array, index):
        prefetch_address(array.ctypes.data + index * array.strides[0])

    return _numba.njit(nogil=True, inline="always")(in_kernel)


def _helper_dispatcher(python: Callable) -> Any:
    if python is prefetch:
        if prefetch not in _helper_dispatchers:
            _helper_dispatchers[prefetch] = _numba_prefetch()
        return _helper_dispatchers[prefetch]
    dispatcher = _helper_dispatchers.get(python)
    if dispatcher is None:
        dispatcher = _helper_dispatchers[python] = _numba.njit(nogil=True, inline="always")(
            _in_namespace(python, _namespace(python.__module__)))
    return dispatcher


def _in_namespace(python: Callable, names: dict) -> Callable:
    """python's code as a function whose globals are `names` (its name, defaults and closure kept)."""
    function = types.FunctionType(python.__code__, names, python.__name__, python.__defaults__, python.__closure__)
    function.__qualname__ = python.__qualname__
    function.__doc__ = python.__doc__
    return function


class Kernel:
    """A numba kernel made on first call (njit, nogil, cached on disk); `python` is the plain function,
    `twin` the numpy function (module:name) that computes the same and that the tests compare it with."""

    def __init__(self, python: Callable, twin: str, options: dict) -> None:
        self.python = python
        self.twin = twin
        self.options = options
        self._compiled: Callable | None = None
        self.elsewhere = False  # another process compiles it into numba's cache now (kernels_ahead)
        self.__name__ = python.__name__
        self.__doc__ = python.__doc__
        self.__module__ = python.__module__

    def __call__(self, *args: Any) -> Any:
        if threading.get_ident() != _MAIN_THREAD:
            return self._run(args)
        with interrupts.held():  # (the command's Ctrl-C waits for the kernel, then is raised here)
            return self._run(args)

    def _run(self, args: tuple) -> Any:
        compiled = self._compiled
        calls = _recording
        if calls is not None:  # (signatures_of: recorded and run as Python)
            call = (f"{self.__module__}.{self.__name__}", tuple(_numba.typeof(a) for a in args))
            if call not in calls:
                calls.append(call)
            return self.python(*args)
        if compiled is None:
            compiled = self._load(args)
        try:
            return compiled(*args)
        except SystemError as exc:  # a signal handler raised while the kernel ran (Ctrl-C): numba's
            interrupt = _interrupt_behind(exc)  # dispatcher reports it as a SystemError it caused
            if interrupt is not None:
                raise interrupt from None
            raise

    def _load(self, args: tuple) -> Callable:
        """The dispatcher, its code for these arguments' types compiled or loaded from numba's cache."""
        with _lock:
            if self._compiled is None:
                if numba_module() is None:
                    require()
                    raise KernelsMissing(f"{self.__name__} needs numba: {INSTALL_HINT}")
                self.load_for(tuple(_numba.typeof(a) for a in args))
        return self._compiled

    def load_for(self, types: tuple) -> None:
        """Compile (or load from numba's cache) the code for these argument types, without a call."""
        with _lock:
            dispatcher = self._compiled
            if dispatcher is None:
                dispatcher = _njit(_in_namespace(self.python, _namespace(self.python.__module__)), self.options)
            with compiles.timing(self.__name__, dispatcher):
                dispatcher.compile(types)
            self._compiled = dispatcher

    def code_size(self) -> int:
        """Bytes of Python bytecode numba compiles for it: its own and every helper's it inlines (what
        its compile time grows with, for dealing kernels to compiling processes)."""
        names, seen, size, todo = _namespace(self.python.__module__), set(), 0, [self.python]
        while todo:
            function = todo.pop()
            if function in seen:
                continue
            seen.add(function)
            size += len(function.__code__.co_code)
            todo += [names[n] for n in function.__code__.co_names
                     if isinstance(names.get(n), types.FunctionType) and names[n] in _helpers]
        return size


def _interrupt_behind(exc: BaseException) -> BaseException | None:
    """The KeyboardInterrupt in exc's chain of causes, else None."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        cause = cause.__cause__
    return None


_MAIN_THREAD = threading.main_thread().ident


def _njit(python: Callable, options: dict) -> Any:
    try:
        return _numba.njit(cache=True, nogil=True, **options)(python)
    except RuntimeError:  # numba found no cache locator for the file (_choose_cache_dir could not help)
        if not _cache_note:
            _cache_note.append("numba cannot cache parbpe's kernels here: they are compiled in every run; "
                               "set NUMBA_CACHE_DIR to a writable directory")
            if compiles.announce is not None:
                compiles.announce(_cache_note[0])
        return _numba.njit(cache=False, nogil=True, **options)(python)


def kernel(python: Callable | None = None, *, twin: str = "", **options: Any) -> Any:
    """Declare a kernel: `@kernel(twin="parbpe.module:qualname")` on a function in numba's subset. twin
    names the numpy function (or method) that computes the same: for a step of a larger job, the numpy
    path of that job's entry point. tests/test_twins.py fails for a kernel without one, or whose twin
    has no comparison there. options go to numba.njit."""
    def declare(function: Callable) -> Kernel:
        made = Kernel(function, twin, options)
        KERNELS[f"{function.__module__}.{function.__name__}"] = made
        return made

    return declare if python is None else declare(python)


# --- what the first run shows: compiles past a second, and Ctrl-C during them ---------------------
class _Compiles:
    """This process's kernel loads: which were compiled (not in numba's cache) and for how long. A
    compile still going after a second is announced once, through the reporter a run installs."""

    ANNOUNCE_AFTER = 1.0

    def __init__(self) -> None:
        self.loaded: list[str] = []
        self.compiled: list[str] = []
        self.seconds = 0.0
        self.announce: Callable[[str], None] | None = None
        self._announced = False
        self._started: float | None = None

    @contextlib.contextmanager
    def timing(self, name: str, dispatcher: Any) -> Iterator[None]:
        timer = threading.Timer(self.ANNOUNCE_AFTER, self.say_compiling)
        timer.daemon = True
        start = time.perf_counter()
        if self._started is None:
            self._started = start
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            stats = dispatcher.stats
            self.loaded.append(name)
            if sum(stats.cache_misses.values()) or not sum(stats.cache_hits.values()):
                self.compiled.append(name)
                self.seconds += time.perf_counter() - start

    def say_compiling(self, where: str = "") -> None:
        """Announce, once, that numba compiles kernels (where: e.g. " in 2 processes")."""
        if self._announced or self.announce is None:
            return
        self._announced = True
        self.announce(f"compiling numba kernels{where} (the first run after an install; later runs load them "
                      "from numba's cache)")

    def mark(self) -> tuple[int, int, float]:
        """Where the record stands now (summary(since=...) reports what came after)."""
        return len(self.loaded), len(self.compiled), self.seconds

    def summary(self, since: tuple[int, int, float] = (0, 0, 0.0)) -> dict[str, Any]:
        """What stats.json says of the kernels this process loaded since `since` (a mark())."""
        return {"loaded": sorted(set(self.loaded[since[0]:])), "compiled": sorted(set(self.compiled[since[1]:])),
                "compile_seconds": round(self.seconds - since[2], 2),
                "cache": _cache_note[0] if _cache_note else "numba's cache"}

    @contextlib.contextmanager
    def reporting_to(self, announce: Callable[[str], None]) -> Iterator[None]:
        """Compiles past a second announced through announce(line) for the duration (a run's reporter)."""
        before, self.announce = self.announce, announce
        try:
            yield
        finally:
            self.announce = before


compiles = _Compiles()


class _Interrupts:
    """Ctrl-C held while the main thread is in a kernel or numba compiles one: a KeyboardInterrupt
    raised inside numba's compiler (in LLVM's callbacks into Python) is swallowed, or leaves the
    interpreter to end by SIGINT whatever the command returns. The parbpe command's handler asks
    should_raise(); a Ctrl-C held is raised as the kernel call returns."""

    def __init__(self) -> None:
        self._depth = 0  # kernel calls under way in the main thread
        self._held = False

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if self._depth == 0 and self._held:
            self._held = False
            raise KeyboardInterrupt

    def should_raise(self) -> bool:
        """In the command's SIGINT handler: False (the interrupt held for later) inside a kernel call."""
        if self._depth:
            self._held = True
            return False
        return True


interrupts = _Interrupts()


# --- loading ahead ----------------------------------------------------------------------------------
_recording: list | None = None  # the kernel calls signatures_of records (from every thread) while it runs


def signatures_of(warm_up: Callable[[], None]) -> list[tuple[str, tuple]]:
    """The kernels warm_up() calls, by KERNELS name, with the numba types of each call's arguments, in
    call order and once each. Meanwhile the kernels run as plain Python (warm-ups call them on a few
    bytes: milliseconds) and nothing is compiled or loaded: the list is what a first run must compile,
    and compiling processes deal it out (deal) and compile their shares (Kernel.load_for). Every
    thread's kernel calls are recorded meanwhile (a warm-up's own threads too): no other may run one."""
    global _recording
    numba_module()
    with _lock:
        _recording = calls = []
        try:
            with warnings.catch_warnings():  # (a kernel's integers wrap silently; numpy's scalars warn)
                warnings.simplefilter("ignore", RuntimeWarning)
                warm_up()
        finally:
            _recording = None
    return calls


def deal(calls: list[tuple[str, tuple]], hands: int) -> list[list[tuple[str, tuple]]]:
    """calls dealt to `hands` compiling processes, the largest kernel first to the hand with the least
    code (Kernel.code_size): every process computes the same deal from the same calls, in any order."""
    dealt: list[list[tuple[str, tuple]]] = [[] for _ in range(hands)]
    held = [0] * hands
    size = {name: KERNELS[name].code_size() for name, _ in calls}
    for call in sorted(calls, key=lambda call: (-size[call[0]], call[0], str(call[1]))):
        least = held.index(min(held))
        dealt[least].append(call)
        held[least] += size[call[0]]
    return dealt


def preload(name: str, warm_up: Callable[[], None]) -> None:
    """Run warm_up() (kernel calls on tiny arrays: numba's import and the kernels' loading) in a
    background thread, once per name in this process, while the caller goes on with work that
    releases the GIL. An error in the thread is dropped: the same kernel called for real raises it
    where it belongs. settle() waits for the thread."""
    with _lock:
        if name in _preloading:
            return
        _preloading[name] = thread = threading.Thread(target=_quietly, args=(warm_up,), name=f"parbpe-jit-{name}",
                                                      daemon=True)
    thread.start()


def _quietly(warm_up: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):
        warm_up()


def settle() -> None:
    """Wait for every preload thread: called before a fork, which copies a lock a thread holds as held."""
    for thread in list(_preloading.values()):
        thread.join()
