# brig's session Python: the persistent interpreter of a session's jail. Started inside the
# jail under all its restrictions (as `python3 -c "...exec(compile(sys.argv[1],
# '<brig-session>', 'exec'))" THIS_FILE`, so this file's frames are named <brig-session>),
# it does Python's startup once, says {"ready": true} on descriptor 3, then runs the cells
# the runner sends there, one JSON object per line, as a notebook does: one __main__
# namespace for all of them, the final expression's repr as the cell's result, an
# exception as the cell's error. Its own names stay out of that namespace: this file runs
# in the launcher's __main__ dict, which is no longer sys.modules["__main__"] once the
# session starts.
#
# Request: {"id": N, "code": "..."}. Reply (after the cell's stdout and stderr are flushed):
# {"id": N, "result": "repr" | null, "error": null | {"type", "message", "traceback"},
#  "results": [mime bundle, ...], "results_dropped": N}, data only. The results are what
# the cell passed to display(), then matplotlib's figures (shown or still open at its end,
# as PNG, then closed), then the final expression's value (`is_main_result`); see
# `bundle` below. A line that is not such a request gets an error of type ProtocolError. EOF on
# descriptor 3 ends the interpreter with status 0. The cell runs in this process and can
# write to descriptor 3 too: brig takes a reply as the cell's end only once the kernel
# shows this process's main thread back in its read of descriptor 3 (`serve` below), and
# its CPU time from the kernel (see docs/protocol.md, the trust boundary).
import ast, builtins, importlib.machinery, io, json, linecache, os, signal, socket, sys, traceback, types

# What cells commonly import, imported once here so that a cell's `import` finds them in
# sys.modules (they are not bound in the cell's namespace).
import collections, csv, datetime, functools, itertools, math, pathlib, random, re, statistics
import base64, bisect, copy, dataclasses, decimal, enum, fractions, glob, hashlib, heapq, operator
import pprint, shutil, string, struct, subprocess, tempfile, textwrap, time, typing, uuid

HERE = "<brig-session>"
CONTROL_FD = 3


class State:
    # Whether a SIGINT now interrupts a cell. Outside a cell it is dropped: the interpreter
    # waiting for a request or writing a reply must not be hit by a KeyboardInterrupt.
    interruptible = False
    cells = 0
    # The last cell was interrupted: brig killed what it started (see `reap_children`).
    interrupted = False


def on_sigint(signum, frame):
    # Runs in the main thread between two bytecodes. While `interruptible` is set the main
    # thread is inside the cell's `try` (see `execute`), so the KeyboardInterrupt is the
    # cell's; once it is cleared, the signal is ignored.
    if State.interruptible:
        raise KeyboardInterrupt


def reap_children():
    """The processes an interrupted cell started were killed by brig; until this process
    reaps them they are zombies, each holding a pid of the session's limit. Only exited
    children are reaped (WNOHANG): what is still running is left alone."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# --- Rich outputs: mime bundles, as IPython's display() makes them. ---

# The most bytes (as JSON) of a cell's results a reply carries: brig reads an interpreter's
# line up to 17 MiB, and counts the results against the exec's output limit (at most 8 MiB).
MAX_RESULTS = 16 << 20

# IPython's _repr_*_ methods and the mime type each gives.
REPR_METHODS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_pdf_", "application/pdf"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
    ("_repr_javascript_", "application/javascript"),
)
BINARY = ("image/png", "image/jpeg", "application/pdf")


def mime_value(mime, value):
    """A bundle's value as JSON carries it: binary types as base64 text, JSON as itself
    (when it is JSON), the others as text; None when it cannot be."""
    if mime in BINARY and isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if mime == "application/json" or mime.endswith("+json"):
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            return None
        return value
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    return value if isinstance(value, str) else None


def figure_png(figure):
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def is_figure(obj):
    figure = sys.modules.get("matplotlib.figure")
    return figure is not None and isinstance(obj, figure.Figure)


def method_of(obj, name):
    """obj's method `name`, or None (also when looking it up raises: an object whose
    __getattr__ raises something else than AttributeError still has its repr)."""
    if isinstance(obj, type):
        return None
    try:
        method = getattr(obj, name, None)
    except Exception:
        return None
    return method if callable(method) else None


def bundle(obj):
    """obj's mime bundle: text/plain (its repr) and whatever its _repr_*_ methods (or
    _repr_mimebundle_) give; a dict or list as application/json too; a matplotlib figure
    as image/png. A _repr_*_ method that fails or gives None adds nothing; a failing
    repr raises."""
    data = {}
    method = method_of(obj, "_repr_mimebundle_")
    if method is not None:
        try:
            given = method()
            if isinstance(given, tuple):
                given = given[0]
            for mime, value in (given or {}).items():
                value = mime_value(str(mime), value)
                if value is not None:
                    data[str(mime)] = value
        except Exception:
            pass
    for name, mime in REPR_METHODS:
        method = method_of(obj, name)
        if mime in data or method is None:
            continue
        try:
            value = method()
            if isinstance(value, tuple):  # (data, metadata)
                value = value[0]
            value = mime_value(mime, value) if value is not None else None
        except Exception:
            value = None
        if value is not None:
            data[mime] = value
    if is_figure(obj) and "image/png" not in data:
        data["image/png"] = mime_value("image/png", figure_png(obj))
    if isinstance(obj, (dict, list)) and "application/json" not in data:
        value = mime_value("application/json", obj)
        if value is not None:
            data["application/json"] = value
    if "text/plain" not in data:
        # A repr that raises is the cell's error, as in a notebook.
        data["text/plain"] = repr(obj)
    return data


def scrub(value):
    """value with its strings made UTF-8 (lone surrogates written out as \\udcXX text),
    keys and all, so that the reply stays one valid line."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {scrub(str(key)): scrub(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(item) for item in value]
    return value


class Results:
    """The results of the running cell, in order, bounded (what passes MAX_RESULTS is
    dropped and counted)."""
    kept = []
    size = 0
    dropped = 0

    @classmethod
    def reset(cls):
        cls.kept, cls.size, cls.dropped = [], 0, 0

    @classmethod
    def add(cls, data, main=False):
        data = dict(scrub(data), is_main_result=main)
        # The text as `result` is cut (MAX_TEXT); the rich formats only by MAX_RESULTS.
        if isinstance(data.get("text/plain"), str):
            data["text/plain"] = clean(data["text/plain"])
        try:
            size = len(json.dumps(data, ensure_ascii=False).encode("utf-8", "backslashreplace"))
        except (TypeError, ValueError):
            cls.dropped += 1
            return
        if cls.size + size > MAX_RESULTS:
            cls.dropped += 1
            return
        cls.size += size
        cls.kept.append(data)


def display(*objs, **_options):
    """Shows objects as a notebook does: each becomes one of the cell's results (a mime
    bundle). A dict of mime types with raw=True is taken as the bundle itself."""
    for obj in objs:
        if _options.get("raw") and isinstance(obj, dict):
            data = {str(k): mime_value(str(k), v) for k, v in obj.items()}
            Results.add({k: v for k, v in data.items() if v is not None})
        else:
            Results.add(bundle(obj))


def show_figures(*_args, **_kwargs):
    """matplotlib's pyplot.show() here: every open figure becomes a result (PNG), and is
    closed. Also what runs at the end of each cell."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    helpers = sys.modules["matplotlib._pylab_helpers"]
    for manager in list(helpers.Gcf.get_all_fig_managers()):
        figure = manager.canvas.figure
        try:
            Results.add(bundle(figure))
        finally:
            pyplot.close(figure)


class PyplotHook:
    """An import hook that gives matplotlib.pyplot, once a cell imports it, brig's show()
    (Agg's is a no-op that warns)."""

    def find_spec(self, name, path, target=None):
        if name != "matplotlib.pyplot":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            module.show = show_figures

        spec.loader.exec_module = exec_module
        return spec


# IPython.display's classes for a jail without IPython: cells written for a notebook
# (`from IPython.display import display, HTML`) run as they are.
IPYTHON_DISPLAY = """
from builtins import display


class _Shown:
    def __init__(self, data=None, url=None, filename=None, **_options):
        if data is None and filename is not None:
            with open(filename, "rb" if self._binary else "r") as file:
                data = file.read()
        self.data = data

    def __repr__(self):
        return f"<IPython.core.display.{type(self).__name__} object>"


def _shown(name, mime, binary=False):
    method = lambda self: self.data
    return type(name, (_Shown,), {"_binary": binary, "_repr_" + mime + "_": method})


HTML = _shown("HTML", "html")
Markdown = _shown("Markdown", "markdown")
SVG = _shown("SVG", "svg")
Latex = _shown("Latex", "latex")
Javascript = _shown("Javascript", "javascript")
JSON = _shown("JSON", "json")
Image = _shown("Image", "png", binary=True)
"""


class IPythonShim:
    """An import hook that gives `IPython` and `IPython.display` (the classes above) when
    the jail has no IPython of its own."""

    def find_spec(self, name, path, target=None):
        # Last on sys.meta_path: asked only when no IPython was found.
        if name not in ("IPython", "IPython.display"):
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=(name == "IPython"))

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        if module.__name__ == "IPython":
            module.__path__ = []
            module.display = display
        else:
            exec(compile(IPYTHON_DISPLAY, "<brig IPython.display>", "exec"), module.__dict__)


def setup_rich_outputs():
    # No display in a jail: matplotlib draws with Agg unless the session chose a backend.
    os.environ.setdefault("MPLBACKEND", "Agg")
    # Debian's matplotlib looks for its matplotlibrc in /etc, which a jail's /etc does not
    # have; the package's own copy is the same file.
    packaged = "/usr/share/matplotlib/mpl-data/matplotlibrc"
    if "MATPLOTLIBRC" not in os.environ and not os.path.exists("/etc/matplotlibrc") \
            and os.path.exists(packaged):
        os.environ["MATPLOTLIBRC"] = packaged
    sys.meta_path.insert(0, PyplotHook())
    sys.meta_path.append(IPythonShim())
    builtins.display = display


def new_main():
    """The cells' namespace: a __main__ module as the REPL's."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    return main.__dict__


def flush():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass


def run(code, namespace):
    """Runs one cell's code and returns the value of its final expression (None when it
    ends with a statement). The cell is compiled under a name of its own, whose source
    linecache keeps, so that a traceback through a function defined in an earlier cell
    still shows that cell's lines."""
    State.cells += 1
    name = f"<cell-{State.cells}>"
    # mtime None: linecache.checkcache keeps the entry (it has no file to compare with).
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    tree = compile(code, name, "exec", ast.PyCF_ONLY_AST)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, name, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), name, "eval"), namespace)


def execute(code, namespace):
    """Runs a cell, flushes its output; returns (result, error). Its rich results are in
    `Results`."""
    Results.reset()
    try:
        State.interruptible = True
        try:
            try:
                value = run(code, namespace)
                result = None
                # Figures first (as a notebook shows them), then the value, closing a
                # figure that is the value.
                main = None if value is None else bundle(value)
                if is_figure(value) and "matplotlib.pyplot" in sys.modules:
                    sys.modules["matplotlib.pyplot"].close(value)
                show_figures()
                if value is not None:
                    namespace["_"] = value
                    result = main["text/plain"]
                    Results.add(main, main=True)
            finally:
                # A cell may have replaced the handler; the session needs its own back.
                if signal.getsignal(signal.SIGINT) is not on_sigint:
                    signal.signal(signal.SIGINT, on_sigint)
                flush()
        finally:
            State.interruptible = False
    except BaseException as error:
        # A SIGINT that came between the end of the cell and `interruptible = False` lands
        # here too: it is reported as the cell's KeyboardInterrupt, never escapes. Figures
        # the cell drew before it failed are shown, as a notebook does.
        try:
            show_figures()
        except Exception:
            pass
        return None, describe(error)
    return result, None


def hide_own_frames(error, seen):
    """Drops this file's frames (the call into the cell, the SIGINT handler) from the
    tracebacks of `error` and of the exceptions chained to it or grouped in it."""
    if error is None or id(error) in seen:
        return
    seen.add(id(error))
    kept = []
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename != HERE:
            kept.append(tb)
        tb = tb.tb_next
    for tb, after in zip(kept, kept[1:] + [None]):
        tb.tb_next = after
    error.__traceback__ = kept[0] if kept else None
    hide_own_frames(error.__cause__, seen)
    hide_own_frames(error.__context__, seen)
    for inner in getattr(error, "exceptions", None) or ():
        if isinstance(inner, BaseException):
            hide_own_frames(inner, seen)


def describe(error):
    """The error object: as a cold `python3` would print the traceback, minus the
    session's frames. Like the REPL, keeps it in sys.last_* (for pdb.pm())."""
    hide_own_frames(error, set())
    sys.last_type, sys.last_value, sys.last_traceback = type(error), error, error.__traceback__
    try:
        message = str(error)
    except BaseException:
        message = "<exception str() failed>"
    try:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    except BaseException:
        text = f"{type(error).__name__}: {message}\n"
    return {"type": type(error).__name__, "message": message, "traceback": text}


# The most characters of a result, message or traceback a reply carries (and of a rich
# result's text/plain): with the results (at most MAX_RESULTS) a reply stays one line
# within the 17 MiB brig reads (a longer line breaks the protocol).
MAX_TEXT = 40_000


def clean(text):
    # Lone surrogates (from surrogateescape'd bytes, say) are not UTF-8: written out as
    # \udcXX text rather than breaking the reply.
    if text is None:
        return None
    if len(text) > MAX_TEXT:
        text = f"{text[:MAX_TEXT]}... [{len(text) - MAX_TEXT} more characters]"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def send(control, message):
    try:
        control.sendall((json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8"))
    except OSError:
        # The runner is gone: so is the session.
        flush()
        os._exit(0)


def reply(control, id, result, error, results=(), dropped=0):
    send(control, {
        "id": id,
        "result": clean(result),
        "error": error and {key: clean(value) for key, value in error.items()},
        "results": list(results),
        "results_dropped": dropped,
    })


def parse(line):
    """(id, code), or (id, None) and the ProtocolError for a line that is not a request."""
    try:
        request = json.loads(line)
    except ValueError as error:
        return None, {"type": "ProtocolError", "message": f"not a JSON line: {error}", "traceback": ""}
    if not isinstance(request, dict) or not isinstance(request.get("code"), str):
        id = request.get("id") if isinstance(request, dict) else None
        return id, {"type": "ProtocolError", "message": 'expected {"id": N, "code": "..."}', "traceback": ""}
    return request.get("id"), request["code"]


def rehearse():
    """Walks a cell's paths once before the first request (a result, an exception, a
    SyntaxError), so that their code is warm too."""
    scratch = {"__builtins__": builtins, "__name__": "__main__"}
    for code in ("x = 1\nx + 1", "1 / 0", "x ="):
        execute(code, scratch)
    json.dumps({"id": 0, "result": "2", "error": None, "results": Results.kept})
    Results.reset()
    for name in [name for name in linecache.cache if name.startswith("<cell-")]:
        del linecache.cache[name]
    State.cells = 0
    del sys.last_type, sys.last_value, sys.last_traceback


def serve():
    signal.signal(signal.SIGINT, on_sigint)
    # The cells' children must not hold the runner's socket (nor write to it).
    os.set_inheritable(CONTROL_FD, False)
    control = socket.socket(fileno=CONTROL_FD)
    requests = control.makefile("rb")
    # As the REPL: no script name, and not this file in the arguments.
    sys.argv = [""]
    sys.orig_argv = sys.orig_argv[:1]
    setup_rich_outputs()
    rehearse()
    namespace = new_main()
    send(control, {"ready": True})
    while True:
        line = requests.readline()
        if not line:
            break
        id, code = parse(line)
        if isinstance(code, dict):
            reply(control, id, None, code)
            continue
        if State.interrupted:
            reap_children()
        result, error = execute(code, namespace)
        State.interrupted = bool(error) and error.get("type") == "KeyboardInterrupt"
        reply(control, id, result, error, Results.kept, Results.dropped)
        Results.reset()
    # EOF: the session is over. Threads a cell started are not waited for.
    flush()
    os._exit(0)


serve()
