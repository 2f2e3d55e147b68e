"""What an experiment's rules *do*, as a hash that formatting, comments, docstrings and import paths leave unchanged.

A results JSON names the commit of the rules that judged it (`verdicts.provenance`). Its verdicts stand while the
rules' logic is the same as at that commit: the rules file, and of experiments/verdicts.py what the judging reaches
(from `judge_all` and every name the rules file uses, followed through the functions and constants they name). A
change of logic anywhere in that reach changes the hash, so the JSON turns post hoc; reformatting a rules file,
moving it to another import path, or editing a part of verdicts.py no rule reaches (the provenance code, say) does
not. This file is not among the rules' files: changing it changes no verdict's standing.
"""

from __future__ import annotations

import ast
import hashlib
from typing import Optional

from experiments import verdicts

ENTRY = ("judge_all",)  # what the harness and the results table call to judge


def _imported(node: ast.Import | ast.ImportFrom) -> ast.stmt:
    """An import as the names it binds and the objects they are, without the module path (which a package move
    changes): `import verdicts` and `from experiments import verdicts` read alike."""
    names = ",".join(
        f"{a.name.split('.')[-1]} as {a.asname}" if a.asname else a.name.split(".")[-1] for a in node.names
    )
    return ast.Expr(ast.Constant(f"import {names}"))


def _normalised(tree: ast.AST) -> ast.AST:
    """The tree without docstrings, and with its imports as `_imported` reads them (what a formatter or a package
    move changes; comments and layout are not in the tree at all)."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body.pop(0)
        body[:] = [_imported(n) if isinstance(n, (ast.Import, ast.ImportFrom)) else n for n in body]
        if not body and not isinstance(node, ast.Module):
            body.append(ast.Pass())
    return tree


def _names(node: ast.AST) -> set[str]:
    """Every name a node mentions, as a variable or as an attribute (`verdicts.fisher`)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def _top_level(tree: ast.Module) -> dict[str, ast.stmt]:
    defined: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        defined[name.id] = node
    return defined


def logic_hash(rules_source: str, verdicts_source: str) -> str:
    """The hash of a rules file's normalised tree and of the parts of verdicts.py it reaches."""
    rules = _normalised(ast.parse(rules_source))
    defined = _top_level(_normalised(ast.parse(verdicts_source)))  # type: ignore[arg-type]
    todo, reached = list(_names(rules) | set(ENTRY)), set()
    while todo:
        name = todo.pop()
        if name in defined and name not in reached:
            reached.add(name)
            todo.extend(_names(defined[name]))
    parts = [ast.dump(rules)] + sorted({ast.dump(defined[n]) for n in reached})
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def at_commit(name: str, commit: str) -> Optional[str]:
    """The rules' logic hash at `commit` (None: git cannot show the files there)."""
    sources = [verdicts._git("show", f"{commit}:{f}") for f in verdicts.rule_files(name)]
    return None if None in sources else logic_hash(*sources)


def now(name: str) -> Optional[str]:
    """The rules' logic hash in the working tree (None: the experiment has no rules file)."""
    paths = [verdicts.RULES.parent.parent / f for f in verdicts.rule_files(name)]
    return logic_hash(*(p.read_text() for p in paths)) if paths[0].exists() else None


def unchanged_since(name: str, commit: str) -> bool:
    """Whether the rules judge as they did at `commit`."""
    then = at_commit(name, commit)
    return then is not None and then == now(name)
