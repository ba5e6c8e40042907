"""Contract check: every argument VLLMEngine passes to vLLM is accepted by the vLLM version the worker image pins.

vLLM needs CUDA, so it is not installed on our machines and no test runs the calls in pipeline/llm/engines.py.
This script compares both sides as source code, importing neither:
- vLLM: the wheel of the pinned version (docker/constraints-gpu.txt, else the Dockerfile), fetched once with
  `pip download --no-deps` and read as a zip. From vllm/entrypoints/llm.py: LLM.__init__, LLM.generate, LLM.chat
  (and any other LLM method we call), plus the fields of EngineArgs, where LLM.__init__ sends its **kwargs. From
  vllm/sampling_params.py: the fields of SamplingParams (a msgspec Struct).
- ours: every call in class VLLMEngine to LLM(...), to methods of the LLM it builds (self.llm.generate/chat), and
  to SamplingParams (also through self.sampling_params), read with ast: keyword names and positional arguments.
Each keyword must be a parameter of its target, or an EngineArgs field reached through LLM's **kwargs; each
positional argument must land on the parameter we mean (MEANT_POSITIONAL, checked by name); each required
parameter must be passed. **config.extra carries the user's own keywords and is reported, not checked.

Prints a table (call, argument, where vLLM accepts it) and the signatures vLLM offers. Exit 0 when everything is
found, 1 when something is missing, 2 when the check cannot run (no wheel, a file not found). Run by hand, not
in CI (the first run downloads ~330 MB into the cache), e.g. after changing the vLLM pin or VLLMEngine:

    .venv/bin/python benchmarks/vllm_contract.py [--version X] [--wheel PATH] [--cache-dir DIR] [--all-fields]
    .venv/bin/python benchmarks/vllm_contract.py --self-test   # no wheel needed: shows that the check can fail
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import io
import re
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENGINES_PY = REPO / "pipeline" / "llm" / "engines.py"
OUR_CLASS = "VLLMEngine"
DEFAULT_CACHE = Path.home() / ".cache" / "hardpos" / "vllm_wheel"
# Where to look for a class our code imports from `vllm` when vllm/__init__.py does not say (it maps names to
# modules in MODULE_ATTRS, for its lazy imports).
VLLM_CLASSES = {"LLM": "vllm/entrypoints/llm.py", "SamplingParams": "vllm/sampling_params.py"}
# What our positional arguments mean, slot by slot. Checked by name: a reordered signature would still accept
# the same number of arguments. A call that passes more positional arguments than listed here fails until its
# meaning is added.
MEANT_POSITIONAL = {
    "LLM.__init__": ("model",),
    "LLM.generate": ("prompts", "sampling_params"),
    "LLM.chat": ("messages", "sampling_params"),
}
# The signatures always printed, whether or not our code calls them.
SHOWN = ("LLM.__init__", "LLM.generate", "LLM.chat", "SamplingParams.__init__")

POSITIONAL_KINDS = ("positional-only", "positional")


class SetupError(RuntimeError):
    """The check cannot run (no wheel, a file or class not found); exit 2."""


# --- signatures, as read from source -----------------------------------------------------------------------------

@dataclass
class Param:
    name: str
    kind: str            # positional-only, positional, keyword-only, *args, **kwargs
    default: str | None  # source text; None when the parameter is required (or for *args/**kwargs)

    @property
    def required(self) -> bool:
        return self.default is None and self.kind not in ("*args", "**kwargs")


@dataclass
class Signature:
    title: str                             # LLM.generate, SamplingParams.__init__, EngineArgs
    where: str                             # path:line inside the wheel
    params: list[Param]
    from_fields: bool = False              # a dataclass/Struct: the parameters are its annotated fields
    forwards_to: Signature | None = None   # the class that receives **kwargs (EngineArgs for LLM.__init__)
    forward_call: str = ""                 # the callee named in the source, when it could not be resolved

    def positional(self) -> list[Param]:
        return [p for p in self.params if p.kind in POSITIONAL_KINDS]

    def named(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name and p.kind not in ("*args", "**kwargs")), None)

    def has(self, kind: str) -> bool:
        return any(p.kind == kind for p in self.params)

    def render(self, width: int = 116) -> str:
        """Like Python's signature: `/` after positional-only parameters, `*` before keyword-only ones."""
        parts, kinds = [], [p.kind for p in self.params]
        for i, p in enumerate(self.params):
            first_keyword_only = i == 0 or self.params[i - 1].kind != "keyword-only"
            if p.kind == "keyword-only" and "*args" not in kinds and first_keyword_only:
                parts.append("*")
            prefix = {"*args": "*", "**kwargs": "**"}.get(p.kind, "")
            parts.append(prefix + p.name + ("" if p.default is None else "=" + short(p.default)))
            if p.kind == "positional-only" and (i + 1 == len(self.params) or self.params[i + 1].kind != p.kind):
                parts.append("/")
        body = ", ".join(parts)
        return textwrap.fill(f"({body})", width=width, initial_indent="    ", subsequent_indent="     ")


def short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def function_params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[Param]:
    a = fn.args
    positional = a.posonlyargs + a.args
    first_default = len(positional) - len(a.defaults)  # defaults belong to the last positional parameters
    params = [Param(arg.arg, "positional-only" if i < len(a.posonlyargs) else "positional",
                    ast.unparse(a.defaults[i - first_default]) if i >= first_default else None)
              for i, arg in enumerate(positional)]
    if a.vararg:
        params.append(Param(a.vararg.arg, "*args", None))
    params += [Param(arg.arg, "keyword-only", None if d is None else ast.unparse(d))
               for arg, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        params.append(Param(a.kwarg.arg, "**kwargs", None))
    is_static = any(decorator_name(d) == "staticmethod" for d in fn.decorator_list)
    return params if is_static else params[1:]  # self (or cls) is bound, never passed


def decorator_name(node: ast.expr) -> str:
    node = node.func if isinstance(node, ast.Call) else node
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def callee_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


# --- the wheel ---------------------------------------------------------------------------------------------------

class Wheel:
    """The .py files of a vLLM wheel, parsed on demand; classes found by following each module's imports."""

    def __init__(self, path: Path):
        self.path = path
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())
        self.trees: dict[str, ast.Module] = {}

    def tree(self, path: str) -> ast.Module:
        if path not in self.trees:
            self.trees[path] = ast.parse(self.zip.read(path).decode("utf-8"), filename=path)
        return self.trees[path]

    def version(self) -> str:
        match = re.match(r"vllm-([^-]+)-", self.path.name)
        return match.group(1) if match else "?"

    def module_file(self, module: str) -> str | None:
        base = module.replace(".", "/")
        return next((p for p in (base + ".py", base + "/__init__.py") if p in self.names), None)

    def absolute(self, path: str, module: str | None, level: int) -> str:
        """The dotted name of `from <level dots><module> import ...` written in file `path`."""
        if not level:
            return module or ""
        package = path.rsplit("/", 1)[0].split("/")
        package = package[:len(package) - (level - 1)]
        return ".".join(package + ([module] if module else []))

    def class_in(self, path: str, name: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
        """Class `name` as visible in module file `path`: defined there, or imported (followed to its source)."""
        if path not in self.names or depth > 6:
            return None
        tree = self.tree(path)
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return path, node
        for node in ast.walk(tree):  # also imports under `if TYPE_CHECKING:` and inside functions
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        source = self.module_file(self.absolute(path, node.module, node.level))
                        found = source and self.class_in(source, alias.name, depth + 1)
                        if found:
                            return found
        return None

    def locate(self, name: str, hint: str | None) -> tuple[str, ast.ClassDef]:
        """A top-level vLLM class: through vllm/__init__.py's lazy MODULE_ATTRS, the hint, or any module."""
        candidates = [p for p in (self.lazy_export(name), hint, "vllm/__init__.py") if p]
        for path in candidates:
            found = self.class_in(path, name)
            if found:
                return found
        pattern = re.compile(rf"^class {re.escape(name)}\b", re.M)
        for path in sorted(self.names):  # a moved class: the one module that defines it
            if path.startswith("vllm/") and path.endswith(".py") and pattern.search(self.zip.read(path).decode()):
                found = self.class_in(path, name)
                if found:
                    return found
        raise SetupError(f"class {name} not found in {self.path.name}")

    def lazy_export(self, name: str) -> str | None:
        """vllm/__init__.py maps public names to modules ({"LLM": ".entrypoints.llm:LLM"}) for lazy import."""
        if "vllm/__init__.py" not in self.names:
            return None
        for node in ast.walk(self.tree("vllm/__init__.py")):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
                for key, value in zip(node.value.keys, node.value.values):
                    if (isinstance(key, ast.Constant) and key.value == name and isinstance(value, ast.Constant)
                            and isinstance(value.value, str) and ":" in value.value):
                        module = value.value.split(":")[0]
                        module = "vllm" + module if module.startswith(".") else module
                        return self.module_file(module)
        return None

    # --- what a class accepts ---

    def method(self, path: str, cls: ast.ClassDef, name: str, depth: int = 0):
        """(path, def) of method `name`: the class's own last non-@overload definition, else its bases'."""
        own = [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name
               and not any(decorator_name(d) == "overload" for d in n.decorator_list)]
        if own:
            return path, own[-1]  # a later definition replaces an earlier one, as at run time
        for base in cls.bases:
            found = depth < 8 and self.class_in(path, callee_name(base))
            result = found and self.method(*found, name, depth + 1)
            if result:
                return result
        return None

    def fields(self, path: str, cls: ast.ClassDef, depth: int = 0) -> list[Param]:
        """The init fields of a dataclass / msgspec Struct / pydantic model: annotated class attributes, the bases'
        first (a redefined field keeps its place, as in dataclasses)."""
        merged: dict[str, Param] = {}
        for base in cls.bases:
            found = depth < 8 and self.class_in(path, callee_name(base))
            if found:
                merged.update((p.name, p) for p in self.fields(*found, depth + 1))
        kw_only = any(k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                      for k in cls.keywords + [k for d in cls.decorator_list if isinstance(d, ast.Call)
                                               for k in d.keywords])
        for stmt in cls.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            annotation = ast.unparse(stmt.annotation)
            if "ClassVar" in annotation:
                continue
            if annotation.split(".")[-1] == "KW_ONLY":  # `_: KW_ONLY`: the fields after it are keyword-only
                kw_only = True
                continue
            default = None if stmt.value is None else ast.unparse(stmt.value)
            if isinstance(stmt.value, ast.Call) and callee_name(stmt.value.func) == "field":
                given = {k.arg: k.value for k in stmt.value.keywords}
                if isinstance(given.get("init"), ast.Constant) and given["init"].value is False:
                    continue  # field(init=False): not a parameter
                if "default" not in given and "default_factory" not in given:
                    default = None
            merged[stmt.target.id] = Param(stmt.target.id, "keyword-only" if kw_only else "positional", default)
        return list(merged.values())

    def constructor(self, path: str, cls: ast.ClassDef) -> Signature:
        """What `Cls(...)` accepts: its own __init__, else its fields, else an inherited __init__."""
        own_init = self.method(path, cls, "__init__") if any(
            isinstance(n, ast.FunctionDef) and n.name == "__init__" for n in cls.body) else None
        if own_init:
            return self.function_signature(f"{cls.name}.__init__", *own_init)
        fields = self.fields(path, cls)
        if fields:
            return Signature(f"{cls.name}.__init__", f"{path}:{cls.lineno}", fields, from_fields=True)
        inherited = self.method(path, cls, "__init__")
        if inherited:
            return self.function_signature(f"{cls.name}.__init__", *inherited)
        return Signature(f"{cls.name}.__init__", f"{path}:{cls.lineno}", [], from_fields=True)

    def function_signature(self, title: str, path: str, fn: ast.FunctionDef) -> Signature:
        signature = Signature(title, f"{path}:{fn.lineno}", function_params(fn))
        var_kw = next((p.name for p in signature.params if p.kind == "**kwargs"), None)
        if var_kw:  # where do the **kwargs go? vLLM's LLM.__init__ ends with EngineArgs(..., **kwargs)
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and any(k.arg is None and isinstance(k.value, ast.Name)
                                                      and k.value.id == var_kw for k in node.keywords):
                    signature.forward_call = ast.unparse(node.func)
                    found = self.class_in(path, callee_name(node.func))
                    if found:
                        signature.forwards_to = self.constructor(*found)
                        signature.forwards_to.title = found[1].name
                    break
        return signature


# --- our calls ---------------------------------------------------------------------------------------------------

@dataclass
class OurCall:
    line: int
    text: str            # self.llm.generate(...)
    target: str          # LLM.generate
    positional: int
    starred: list[str]   # *args expressions: how many they hold is unknown
    keywords: list[str]
    spread: list[str]    # **mapping expressions (config.extra): the user's keywords


def our_calls(source: str, filename: str, class_name: str = OUR_CLASS) -> list[OurCall]:
    """Every call to a vLLM class or to a method of a vLLM object in `class_name`, found through the code's own
    imports and assignments (`from vllm import LLM`, `self.llm = LLM(...)`, `self.sampling_params = SamplingParams`)."""
    tree = ast.parse(source, filename=filename)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if cls is None:
        raise SetupError(f"class {class_name} not found in {filename}")
    classes = {}  # local name -> vLLM class
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "vllm" and not node.level:
            classes.update((a.asname or a.name, a.name) for a in node.names if a.name in VLLM_CLASSES)

    def holder(node: ast.expr) -> str | None:
        """self.x or a local name: the key under which an assignment records what it holds."""
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            return "self." + node.attr
        return node.id if isinstance(node, ast.Name) else None

    class_aliases, instances = {}, {}  # holder -> vLLM class; holder -> class of the object it holds

    def class_of(node: ast.expr) -> str | None:
        key = holder(node)
        return classes.get(node.id) if isinstance(node, ast.Name) and node.id in classes else class_aliases.get(key)

    for _ in range(2):  # twice: an alias may be assigned after its first use in source order
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and holder(node.targets[0]):
                key, value = holder(node.targets[0]), node.value
                if class_of(value):
                    class_aliases[key] = class_of(value)
                elif isinstance(value, ast.Call) and class_of(value.func):
                    instances[key] = class_of(value.func)

    calls = []
    for node in ast.walk(cls):
        if not isinstance(node, ast.Call):
            continue
        func, target = node.func, None
        if class_of(func):
            target = class_of(func) + ".__init__"
        elif isinstance(func, ast.Attribute) and instances.get(holder(func.value) or ""):
            target = f"{instances[holder(func.value)]}.{func.attr}"
        elif isinstance(func, ast.Attribute) and class_of(func.value):  # SamplingParams.from_optional(...)
            target = f"{class_of(func.value)}.{func.attr}"
        if target:
            calls.append(OurCall(
                node.lineno, ast.unparse(func) + "(...)", target,
                sum(not isinstance(a, ast.Starred) for a in node.args),
                [ast.unparse(a) for a in node.args if isinstance(a, ast.Starred)],
                [k.arg for k in node.keywords if k.arg],
                ["**" + ast.unparse(k.value) for k in node.keywords if not k.arg]))
    return sorted(calls, key=lambda c: c.line)


# --- the check ---------------------------------------------------------------------------------------------------

@dataclass
class Row:
    line: int
    call: str
    argument: str
    found: str
    ok: bool


def vllm_signature(wheel: Wheel, target: str) -> Signature | None:
    class_name, method = target.split(".", 1)
    path, cls = wheel.locate(class_name, VLLM_CLASSES.get(class_name))
    if method == "__init__":
        return wheel.constructor(path, cls)
    found = wheel.method(path, cls, method)
    return wheel.function_signature(target, *found) if found else None


def check_call(call: OurCall, signature: Signature | None) -> list[Row]:
    def row(argument: str, found: str, ok: bool) -> Row:
        return Row(call.line, call.text, argument, found, ok)

    if signature is None:
        return [row("(the call)", f"MISSING: vLLM has no {call.target}", False)]
    rows, positional = [], signature.positional()
    meant = MEANT_POSITIONAL.get(call.target, ())
    for i in range(call.positional):
        if i >= len(positional):
            if signature.has("*args"):
                rows.append(row(f"positional #{i + 1}", "*args (not checked)", True))
            else:
                rows.append(row(f"positional #{i + 1}", f"MISSING: {call.target} takes only {len(positional)} "
                                                        "positional argument(s)", False))
        elif i >= len(meant):
            rows.append(row(f"positional #{i + 1}", f"lands on {positional[i].name!r}, but MEANT_POSITIONAL does "
                                                    "not say what we mean there: add it", False))
        elif positional[i].name != meant[i]:
            rows.append(row(f"positional #{i + 1} ({meant[i]})", f"WRONG SLOT: vLLM's positional #{i + 1} is "
                                                                 f"{positional[i].name!r}", False))
        else:
            rows.append(row(f"positional #{i + 1} ({meant[i]})", f"parameter #{i + 1} {positional[i].name!r}", True))
    for starred in call.starred:
        rows.append(row(starred, "positional, count unknown (not checked)", True))
    bound_positionally = {p.name for p in positional[:call.positional]}
    forward = signature.forwards_to
    for keyword in call.keywords:
        param = signature.named(keyword)
        if keyword in bound_positionally:
            rows.append(row(keyword, "CONFLICT: also passed positionally", False))
        elif param and param.kind == "positional-only":
            rows.append(row(keyword, "MISSING: positional-only, cannot be passed by keyword", False))
        elif param:
            rows.append(row(keyword, ("field" if signature.from_fields else
                                      "keyword-only parameter" if param.kind == "keyword-only" else "parameter"), True))
        elif signature.has("**kwargs") and forward is not None:
            if forward.named(keyword):
                rows.append(row(keyword, f"{forward.title} field (through **kwargs)", True))
            else:
                rows.append(row(keyword, f"MISSING: neither a parameter of {call.target} nor a field of "
                                         f"{forward.title}", False))
        elif signature.has("**kwargs"):
            rows.append(row(keyword, f"**kwargs, passed on to {signature.forward_call or '?'} "
                                     "(not resolved, not checked)", True))
        else:
            rows.append(row(keyword, f"MISSING: not a parameter of {call.target}", False))
    passed = bound_positionally | set(call.keywords)
    for param in signature.params:
        if param.required and param.name not in passed:
            rows.append(row(param.name, "MISSING: required parameter not passed" +
                            (" (unless in " + ", ".join(call.spread) + ")" if call.spread else ""), False))
    for spread in call.spread:
        through = f" or {forward.title} fields" if forward else ""
        rows.append(row(spread, f"user-supplied: its keys must be {call.target} parameters{through} "
                                "(not checked)", True))
    return rows


def table(rows: list[Row]) -> str:
    header = Row(0, "call", "argument", "found where", True)
    width_call = max(len(r.call) for r in rows + [header])
    width_arg = max(len(r.argument) for r in rows + [header])
    lines = [f"{'line':>4}  {'call':<{width_call}}  {'argument':<{width_arg}}  found where"]
    lines.append("-" * len(lines[0]))
    lines += [f"{r.line:>4}  {r.call:<{width_call}}  {r.argument:<{width_arg}}  {r.found}" for r in rows]
    return "\n".join(lines)


def check(wheel_path: Path, engines: Path, all_fields: bool = False) -> tuple[list[Row], str]:
    """The rows of the table, and the report to print (table and signatures)."""
    wheel = Wheel(wheel_path)
    calls = our_calls(engines.read_text(encoding="utf-8"), str(engines))
    if not calls:
        raise SetupError(f"no calls to vLLM found in class {OUR_CLASS} of {engines}")
    signatures: dict[str, Signature | None] = {}
    for target in list(SHOWN) + [c.target for c in calls]:
        if target not in signatures:
            signatures[target] = vllm_signature(wheel, target)
    rows = [r for c in calls for r in check_call(c, signatures[c.target])]

    ours = engines.relative_to(REPO) if engines.is_relative_to(REPO) else engines
    out = [f"vLLM {wheel.version()} ({wheel_path.name}) against {ours}, class {OUR_CLASS}",
           "", table(rows), "", f"Signatures in vLLM {wheel.version()}:"]
    forwards = {}
    for target, signature in signatures.items():
        if signature is None:
            out.append(f"  {target}: not found")
            continue
        what = "fields" if signature.from_fields else "parameters"
        out += [f"  {signature.title} ({signature.where}), {len(signature.params)} {what}:", signature.render()]
        if signature.forwards_to:
            forwards[signature.forwards_to.title] = (signature, signature.forwards_to)
    for name, (via, forward) in forwards.items():
        reached = sorted({r.argument for r in rows if r.found.startswith(f"{name} field")})
        out.append(f"  {name} ({forward.where}): {len(forward.params)} fields, reached through {via.title}'s "
                   f"**kwargs; ours: {', '.join(reached) or 'none'}"
                   + ("" if all_fields else " (--all-fields lists them)"))
        if all_fields:
            out.append(forward.render())
    missing = [r for r in rows if not r.ok]
    out += ["", f"{len(missing)} problem(s)" + (":" if missing else ": every argument is accepted.")]
    out += [f"  line {r.line} {r.call} {r.argument}: {r.found}" for r in missing]
    return rows, "\n".join(out)


# --- pin and wheel -----------------------------------------------------------------------------------------------

def pinned_version() -> str:
    """The vLLM version the worker image installs: docker/constraints-gpu.txt's pin, else one in the Dockerfile."""
    sources = [(REPO / "docker" / "constraints-gpu.txt", r"^\s*vllm\s*==\s*([^\s;#]+)"),
               (REPO / "Dockerfile", r"\bvllm==([0-9][^\s\"';]*)|ARG\s+VLLM_VERSION=(\S+)")]
    for path, pattern in sources:
        if path.exists():
            match = re.search(pattern, path.read_text(encoding="utf-8"), re.M)
            if match:
                return next(g for g in match.groups() if g)
    raise SetupError("no vllm==X pin in docker/constraints-gpu.txt or the Dockerfile; pass --version")


def fetch_wheel(version: str, cache_dir: Path) -> Path:
    """The wheel of vllm==version in cache_dir, downloaded (not installed) when not there yet."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    found = sorted(cache_dir.glob(f"vllm-{version}-*.whl"))
    if not found:
        # The wheel the x86-64 Linux worker image installs, whatever this machine is; the .py files read here are
        # the same in every platform's wheel. --no-deps: vLLM's dependencies (torch, CUDA) are not needed to read it.
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--platform", "manylinux_2_28_x86_64", "--python-version", "3.11",
                   f"vllm=={version}", "-d", str(cache_dir)]
        print("$ " + " ".join(command), flush=True)
        if subprocess.run(command).returncode != 0:
            raise SetupError(f"pip download of vllm=={version} failed (network? version?); or pass --wheel PATH")
        found = sorted(cache_dir.glob(f"vllm-{version}-*.whl"))
        if not found:
            raise SetupError(f"pip download left no vllm-{version}-*.whl in {cache_dir}")
    return found[0]


# --- self-test ---------------------------------------------------------------------------------------------------

def fake_wheel(path: Path, calls: list[OurCall], drop: tuple[str, str] | None = None,
               drop_field: str | None = None, swap_positional: str | None = None) -> Path:
    """A wheel-shaped zip whose vLLM accepts exactly what `calls` pass, less the mismatch asked for: `drop`
    (target, keyword) removes a keyword, `drop_field` an EngineArgs field, `swap_positional` (a target) swaps its
    first two positional parameters."""
    wanted: dict[str, list[str]] = {}
    for c in calls:
        wanted.setdefault(c.target, [])
        wanted[c.target] += [k for k in c.keywords if k not in wanted[c.target] and (c.target, k) != drop]
    init = [k for k in wanted.pop("LLM.__init__", []) if k != "model"]
    direct, forwarded = init[:-1], init[-1:]  # the last LLM keyword goes through **kwargs, as in vLLM
    engine_fields = [f for f in ["model"] + forwarded if f != drop_field]

    llm = ["from vllm.engine.arg_utils import EngineArgs", "", "", "class LLM:",
           "    def __init__(self, model, *, " + "".join(f"{k}=None, " for k in direct) + "**kwargs):",
           "        self.engine_args = EngineArgs(model=model, **kwargs)"]
    sampling = ["import msgspec", "", "", "class SamplingParams(msgspec.Struct, omit_defaults=True):", "    n: int = 1"]
    sampling += [f"    {k}: object = None" for k in wanted.pop("SamplingParams.__init__", [])]
    for target, keywords in wanted.items():
        class_name, method = target.split(".", 1)
        positional = list(MEANT_POSITIONAL.get(target, ()))
        if target == swap_positional:
            positional[:2] = positional[1::-1]
        head = "".join(f", {p}=None" for p in positional) + (", *" if keywords else "")
        line = f"    def {method}(self{head}" + "".join(f", {k}=None" for k in keywords) + "):"
        if class_name == "LLM":
            llm += ["", line, "        return []"]
        else:
            sampling += ["", "    @classmethod", line.replace("(self", "(cls"), "        return cls()"]
    arg_utils = ["from dataclasses import dataclass", "", "", "@dataclass", "class EngineArgs:"]
    arg_utils += [f"    {f}: object = None" for f in engine_fields] or ["    pass"]

    with zipfile.ZipFile(path, "w") as z:
        z.writestr("vllm/__init__.py", 'MODULE_ATTRS = {"LLM": ".entrypoints.llm:LLM"}\n')
        z.writestr("vllm/entrypoints/llm.py", "\n".join(llm) + "\n")
        z.writestr("vllm/engine/arg_utils.py", "\n".join(arg_utils) + "\n")
        z.writestr("vllm/sampling_params.py", "\n".join(sampling) + "\n")
    return path


def self_test(engines: Path) -> int:
    """Fake vLLMs built from our own calls: one that matches must pass, each broken one must fail on the argument
    it breaks."""
    calls = our_calls(engines.read_text(encoding="utf-8"), str(engines))
    with_keywords = [c for c in calls if c.keywords and c.target != "LLM.__init__"]
    dropped = next((c for c in with_keywords if c.target == "LLM.generate"),
                   with_keywords[0] if with_keywords else None)
    llm_keywords = [k for c in calls if c.target == "LLM.__init__" for k in c.keywords if k != "model"]
    swapped = next((c for c in calls if c.target in MEANT_POSITIONAL and c.positional >= 2
                    and len(MEANT_POSITIONAL[c.target]) >= 2), None)

    # (name, fake_wheel options, expected exit code, (call target, argument) that must be reported, or None)
    cases = [("matching vLLM", {}, 0, None)]
    if dropped:
        kw = dropped.keywords[0]
        cases.append((f"{dropped.target} without {kw!r}", {"drop": (dropped.target, kw)}, 1, (dropped.target, kw)))
    if llm_keywords:
        kw = llm_keywords[-1]
        cases.append((f"EngineArgs without {kw!r} (reached through LLM's **kwargs)", {"drop_field": kw}, 1,
                      ("LLM.__init__", kw)))
    if swapped:
        cases.append((f"{swapped.target} with its first two positional parameters swapped",
                      {"swap_positional": swapped.target}, 1, (swapped.target, "positional #1")))
    targets = {c.text: c.target for c in calls}
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, options, expected, must_report) in enumerate(cases):
            wheel = fake_wheel(Path(tmp) / f"vllm-0.0.{i}-py3-none-any.whl", calls, **options)
            captured = io.StringIO()
            with contextlib.redirect_stdout(captured):
                code = main(["--wheel", str(wheel), "--engines", str(engines)])
            rows, _ = check(wheel, engines)
            reported = [r for r in rows if not r.ok and must_report and targets[r.call] == must_report[0]
                        and r.argument.startswith(must_report[1])]
            good = code == expected and (must_report is None or bool(reported))
            failures += not good
            print(f"{'ok  ' if good else 'FAIL'} {name}: exit {code} (expected {expected})")
            for r in reported:
                print(f"       reported: line {r.line} {r.call} {r.argument}: {r.found}")
            if not good:
                print(textwrap.indent(captured.getvalue(), "       | "))
    print(f"self-test: {len(cases) - failures}/{len(cases)} cases as expected")
    return 1 if failures else 0


# --- main --------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", help="vLLM version to check (default: the pin in docker/constraints-gpu.txt)")
    parser.add_argument("--wheel", type=Path, help="a vLLM wheel to read instead of downloading one")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE,
                        help="where downloaded wheels are kept (default: %(default)s)")
    parser.add_argument("--engines", type=Path, default=ENGINES_PY, help="our engines module (default: %(default)s)")
    parser.add_argument("--all-fields", action="store_true", help="also list every EngineArgs field")
    parser.add_argument("--self-test", action="store_true", help="check the check against fake vLLMs (no wheel)")
    args = parser.parse_args(argv)
    try:
        if args.self_test:
            return self_test(args.engines)
        wheel = args.wheel or fetch_wheel(args.version or pinned_version(), args.cache_dir)
        if not wheel.exists():
            raise SetupError(f"{wheel}: no such file")
        print(f"wheel: {wheel} ({wheel.stat().st_size / 1e6:.1f} MB)")
        rows, report = check(wheel, args.engines, args.all_fields)
        print(report)
        return 1 if any(not r.ok for r in rows) else 0
    except (SetupError, OSError, SyntaxError, KeyError, zipfile.BadZipFile) as e:
        print(f"vllm_contract: cannot check: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
