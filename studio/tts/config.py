"""Read a model folder's yaml (``cosyvoice2.yaml`` or ``cosyvoice3.yaml``, HyperPyYAML) with plain PyYAML and
build our modules from it.

HyperPyYAML tags become inert nodes (`Tagged`, `Ref`); references are resolved against the
top-level keys, and `ModelConfig.build` turns a section into our own classes through
`CLASS_TABLE`, never importing upstream code. Training-only sections are read but never built.
"""

from __future__ import annotations

import ast
import importlib
import math
import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from studio.tts.errors import ConfigError

#: Upstream dotted names -> our implementations ("module:attribute"). Anything else is never built.
CLASS_TABLE: dict[str, str] = {
    "cosyvoice.llm.llm.Qwen2LM": "studio.tts.llm.model:Qwen2LM",
    "cosyvoice.llm.llm.Qwen2Encoder": "studio.tts.llm.model:Qwen2Encoder",
    "cosyvoice.utils.common.ras_sampling": "studio.tts.llm.sampling:RasSampling",
    "cosyvoice.flow.flow.CausalMaskedDiffWithXvec": "studio.tts.flow.flow:CausalMaskedDiffWithXvec",
    "cosyvoice.transformer.upsample_encoder.UpsampleConformerEncoder": "studio.tts.flow.encoder:UpsampleConformerEncoder",
    "cosyvoice.flow.flow_matching.CausalConditionalCFM": "studio.tts.flow.cfm:CausalConditionalCFM",
    "cosyvoice.flow.decoder.CausalConditionalDecoder": "studio.tts.flow.estimator:CausalConditionalDecoder",
    "cosyvoice.hifigan.generator.HiFTGenerator": "studio.tts.hift.model:HiFTGenerator",
    "cosyvoice.hifigan.f0_predictor.ConvRNNF0Predictor": "studio.tts.hift.model:ConvRNNF0Predictor",
    "cosyvoice.llm.llm.CosyVoice3LM": "studio.tts.cosyvoice3.llm:CosyVoice3LM",
    "cosyvoice.flow.flow.CausalMaskedDiffWithDiT": "studio.tts.cosyvoice3.flow:CausalMaskedDiffWithDiT",
    "cosyvoice.transformer.upsample_encoder.PreLookaheadLayer": "studio.tts.cosyvoice3.flow:PreLookaheadLayer",
    "cosyvoice.flow.DiT.dit.DiT": "studio.tts.cosyvoice3.dit:DiT",
    "cosyvoice.hifigan.generator.CausalHiFTGenerator": "studio.tts.cosyvoice3.hift:CausalHiFTGenerator",
    "cosyvoice.hifigan.f0_predictor.CausalConvRNNF0Predictor": "studio.tts.cosyvoice3.hift:CausalConvRNNF0Predictor",
    "omegaconf.DictConfig": "studio.tts.config:AttrDict",
}

#: Top-level sections the runtime builds; everything else (hifigan, data pipeline, optimisers) is ignored.
MODEL_SECTIONS = ("llm", "flow", "hift")
#: `get_tokenizer`'s ``version`` when the yaml gives none (upstream's default: CosyVoice2's tokenizer).
DEFAULT_TOKENIZER_VERSION = "cosyvoice2"


class AttrDict(dict):
    """A dict that also answers attribute access: stands in for omegaconf's ``DictConfig``."""

    def __init__(self, content: dict | None = None, **kwargs: Any):
        super().__init__(content or {}, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc


@dataclass
class Tagged:
    """A ``!new:``, ``!name:`` or ``!apply:`` node: what to call and with which arguments."""

    kind: str  # "new" | "name" | "apply"
    target: str
    args: list
    kwargs: dict


@dataclass
class Ref:
    """A ``!ref`` node: ``<key>`` references, possibly inside arithmetic (``<a> * <b>``) or text."""

    expression: str


class _HyperLoader(yaml.SafeLoader):
    """PyYAML loader that keeps HyperPyYAML tags as `Tagged` / `Ref` nodes."""


def _construct_tagged(kind: str):
    def construct(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Tagged:
        if isinstance(node, yaml.MappingNode):
            return Tagged(kind, suffix, [], loader.construct_mapping(node, deep=True))
        if isinstance(node, yaml.SequenceNode):
            return Tagged(kind, suffix, loader.construct_sequence(node, deep=True), {})
        value = loader.construct_scalar(node)
        return Tagged(kind, suffix, [value] if value not in ("", None) else [], {})

    return construct


def _construct_ref(loader: yaml.SafeLoader, node: yaml.Node) -> Ref:
    return Ref(str(loader.construct_scalar(node)))


for _kind in ("new", "name", "apply"):
    _HyperLoader.add_multi_constructor(f"!{_kind}:", _construct_tagged(_kind))
_HyperLoader.add_constructor("!ref", _construct_ref)
# PyYAML reads "1e-06" as a string (YAML 1.1); HyperPyYAML (ruamel) reads it as a float.
_HyperLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)

_REF_PATTERN = re.compile(r"<([^<>]+)>")
_ARITHMETIC = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
}
#: Bounds on a !ref's arithmetic. Real configs multiply a few small numbers (``<a> * <b>``); without bounds
#: a hostile yaml's ``9 ** 9 ** 9 ** 9`` would keep the loader computing a billion-digit integer forever.
MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 64
MAX_MAGNITUDE = 10**18
_ARITHMETIC_TEXT = re.compile(r"[\d\s.eE+\-*/%()]+")
#: Bound on the values a yaml expands to once its aliases and !refs are unfolded. The official yaml has a
#: few hundred; a "billion laughs" yaml (nested aliases) would have billions. Aliased nodes are shared,
#: never copied, so resolving costs the yaml's size; this bound protects what walks the sections later.
MAX_EXPANDED_VALUES = 200_000


class ExpressionTooLarge(ArithmeticError):
    """A !ref's arithmetic is too long or its result too large to evaluate safely."""


def _checked_power(base: Any, exponent: Any) -> Any:
    """``base ** exponent``, refused before it is computed when the result would be huge."""
    if abs(exponent) > MAX_EXPONENT:
        raise ExpressionTooLarge(f"exponent {exponent!r} is above {MAX_EXPONENT}")
    size = abs(base)
    if size not in (0, 1) and abs(exponent) * abs(math.log10(size)) > math.log10(MAX_MAGNITUDE):
        raise ExpressionTooLarge(f"{base!r} ** {exponent!r} is above {MAX_MAGNITUDE:.0e}")
    return operator.pow(base, exponent)


def _evaluate_arithmetic(text: str) -> Any:
    """Evaluate numbers joined by + - * / // ** % and parentheses; raise ValueError otherwise.

    Raises `ExpressionTooLarge` for arithmetic longer than `MAX_EXPRESSION_CHARS`, powers that would
    exceed `MAX_MAGNITUDE` (checked before computing them) and integer results above it, so evaluating
    a yaml always takes microseconds.
    """
    if len(text) > MAX_EXPRESSION_CHARS:
        if _ARITHMETIC_TEXT.fullmatch(text):
            raise ExpressionTooLarge(f"{len(text)} characters of arithmetic (at most {MAX_EXPRESSION_CHARS})")
        raise ValueError(text)  # long text, not arithmetic: string interpolation

    def walk(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow):
                value = _checked_power(left, right)
            else:
                value = _ARITHMETIC[type(node.op)](left, right)
            if isinstance(value, int) and abs(value) > MAX_MAGNITUDE:
                raise ExpressionTooLarge(f"{_shorten(text)} reaches a number above {MAX_MAGNITUDE:.0e}")
            return value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        raise ValueError(text)

    return walk(ast.parse(text, mode="eval"))


class ModelConfig:
    """The parsed yaml: plain values for scalars, `Tagged` nodes for objects, references resolved."""

    def __init__(self, raw: dict, path: Path):
        self.path = path
        self._resolving: set[str] = set()
        self.values: dict[str, Any] = {}
        self._raw = raw
        # id(raw node) -> its resolved value: an alias is one node in PyYAML, resolved once and shared.
        self._resolved: dict[int, Any] = {}
        self._walking: set[int] = set()
        for key in raw:
            self.values[key] = self._resolve_key(key)
        _check_expanded_size(self.values, self.path)

    # -- reference resolution -------------------------------------------------------------------
    def _resolve_key(self, key: str) -> Any:
        if key in self.values:
            return self.values[key]
        if key not in self._raw:
            raise ConfigError(self.path, f"!ref <{key}> names a key the yaml does not define")
        if key in self._resolving:
            raise ConfigError(self.path, f"!ref <{key}> refers to itself")
        self._resolving.add(key)
        try:
            value = self._resolve(self._raw[key])
        finally:
            self._resolving.discard(key)
        self.values[key] = value
        return value

    def _lookup(self, dotted: str) -> Any:
        head, *rest = re.split(r"[.\[\]]+", dotted.strip())
        value = self._resolve_key(head)
        for part in filter(None, rest):
            value = value.kwargs[part] if isinstance(value, Tagged) else value[part]
        return value

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, Ref):
            return self._resolve_ref(value.expression)
        if not isinstance(value, (Tagged, dict, list)):
            return value
        node = id(value)
        if node in self._resolved:
            return self._resolved[node]
        if node in self._walking:
            raise ConfigError(self.path, "a yaml alias contains itself (a recursive anchor)")
        self._walking.add(node)
        try:
            if isinstance(value, Tagged):
                args, kwargs = self._resolve(value.args), self._resolve(value.kwargs)
                resolved: Any = Tagged(value.kind, value.target, args, kwargs)
            elif isinstance(value, dict):
                resolved = {k: self._resolve(v) for k, v in value.items()}
            else:
                resolved = [self._resolve(v) for v in value]
        finally:
            self._walking.discard(node)
        self._resolved[node] = resolved
        return resolved

    def _resolve_ref(self, expression: str) -> Any:
        whole = _REF_PATTERN.fullmatch(expression.strip())
        if whole:
            return self._lookup(whole.group(1))
        substituted = _REF_PATTERN.sub(lambda m: repr(self._lookup(m.group(1))), expression)
        try:
            return _evaluate_arithmetic(substituted)
        except ExpressionTooLarge as exc:
            raise ConfigError(
                self.path, f"!ref {_shorten(expression)} is too large to evaluate: {exc}"
            ) from exc
        except ArithmeticError as exc:  # division by zero, float overflow
            raise ConfigError(self.path, f"!ref {_shorten(expression)} cannot be evaluated: {exc}") from exc
        except (ValueError, SyntaxError):
            # String interpolation (e.g. "<dir>/file"): references become their text.
            return _REF_PATTERN.sub(lambda m: str(self._lookup(m.group(1))), expression)

    # -- access ---------------------------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def __contains__(self, key: str) -> bool:
        return key in self.values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    @property
    def sample_rate(self) -> int:
        return int(self.values.get("sample_rate", 24000))

    @property
    def chunk_size(self) -> int:
        """Streaming hop in speech tokens (the flow's static chunk size)."""
        return int(self.values.get("chunk_size", 25))

    @property
    def tokenizer_version(self) -> str:
        """`get_tokenizer`'s ``version`` (``cosyvoice3`` in CosyVoice3's yaml): which special tokens the text
        tokenizer adds, as upstream's `get_qwen_tokenizer` picks them."""
        node = self.values.get("get_tokenizer")
        version = node.kwargs.get("version") if isinstance(node, Tagged) else None
        if version is None:
            return DEFAULT_TOKENIZER_VERSION
        if not isinstance(version, str):
            raise ConfigError(self.path, f"get_tokenizer's version must be a name, not {version!r}")
        return version

    @property
    def prompt_mel_fmax(self) -> float | None:
        """`feat_extractor`'s ``fmax``: the prompt mel's top frequency (8000 for CosyVoice2; CosyVoice3's yaml
        says null, the Nyquist frequency). 8000 when the yaml has no `feat_extractor`."""
        node = self.values.get("feat_extractor")
        if not isinstance(node, Tagged) or "fmax" not in node.kwargs:
            return 8000.0
        fmax = node.kwargs["fmax"]
        if fmax is None:
            return None
        if not isinstance(fmax, (int, float)) or isinstance(fmax, bool) or fmax <= 0:
            raise ConfigError(
                self.path, f"feat_extractor's fmax must be a positive number or null, not {fmax!r}"
            )
        return float(fmax)

    def _section(self, section: str) -> Tagged:
        node = self.values.get(section)
        if not isinstance(node, Tagged) or node.kind != "new":
            raise ConfigError(self.path, f"expected a '{section}: !new:...' section")
        return node

    def build(self, section: str, factories: dict[str, Any] | None = None) -> Any:
        """Construct a model section (``llm``, ``flow``, ``hift``) as our own classes.

        ``factories`` overrides `CLASS_TABLE` entries (upstream dotted name -> callable), e.g. for
        the builder or for tests.
        """
        if section not in MODEL_SECTIONS:
            raise ConfigError(self.path, f"'{section}' is not a model section ({', '.join(MODEL_SECTIONS)})")
        return self._instantiate(self._section(section), factories or {})

    def _instantiate(self, value: Any, factories: dict[str, Any]) -> Any:
        if isinstance(value, dict):
            return {k: self._instantiate(v, factories) for k, v in value.items()}
        if isinstance(value, list):
            return [self._instantiate(v, factories) for v in value]
        if not isinstance(value, Tagged):
            return value
        if value.kind == "apply":
            raise ConfigError(self.path, f"!apply:{value.target} inside a model section is not supported")
        factory = factories.get(value.target) or _import_target(value.target, self.path)
        args = self._instantiate(value.args, factories)
        kwargs = self._instantiate(value.kwargs, factories)
        try:
            return factory(*args, **kwargs)
        except TypeError as exc:
            raise ConfigError(
                self.path, f"cannot build {value.target} from the yaml's arguments: {exc}"
            ) from exc


def _check_expanded_size(values: dict, path: Path) -> None:
    """Raise `ConfigError` when ``values`` unfold (aliases and references copied out) past the bound.

    Shared nodes are counted once per path through them, from a memo, so this costs the yaml's size.
    """
    sizes: dict[int, int] = {}

    def size(value: Any) -> int:
        if isinstance(value, Tagged):
            children: list = [value.args, value.kwargs]
        elif isinstance(value, dict):
            children = list(value.values())
        elif isinstance(value, list):
            children = value
        else:
            return 1
        node = id(value)
        if node not in sizes:
            sizes[node] = 0  # a cycle through !ref counts as nothing more; the walk below cannot loop
            total = 1 + sum(size(child) for child in children)
            if total > MAX_EXPANDED_VALUES:
                raise ConfigError(
                    path,
                    f"its aliases and references expand to more than {MAX_EXPANDED_VALUES:,} values "
                    "(nested yaml aliases?)",
                )
            sizes[node] = total
        return sizes[node]

    size(values)


def _shorten(expression: str, limit: int = 60) -> str:
    """The expression quoted for a message, cut to ``limit`` characters (hostile ones run long)."""
    return repr(expression if len(expression) <= limit else expression[:limit] + "...")


def _import_target(target: str, path: Path) -> Any:
    spec = CLASS_TABLE.get(target)
    if spec is None:
        raise ConfigError(
            path,
            f"unknown class {target!r} in a model section (the runtime knows: "
            f"{', '.join(sorted(CLASS_TABLE))})",
        )
    module_name, attribute = spec.split(":")
    return getattr(importlib.import_module(module_name), attribute)


def read_config(path: str | Path, overrides: dict[str, Any] | None = None) -> ModelConfig:
    """Parse a model yaml; ``overrides`` replace top-level keys before references resolve."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(path, f"missing: the model folder needs its {path.name}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, f"cannot be read: {exc}") from exc
    try:
        raw = yaml.load(text, Loader=_HyperLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(path, f"is not valid yaml: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(path, "is not valid yaml: nested too deeply") from exc
    if not isinstance(raw, dict):
        raise ConfigError(path, "expected a mapping of hyperparameters at the top level")
    raw.update(overrides or {})
    try:
        config = ModelConfig(raw, path)
    except RecursionError as exc:
        raise ConfigError(path, "its values are nested too deeply (a recursive alias?)") from exc
    for section in MODEL_SECTIONS:
        config._section(section)
    return config
