"""Build bench/data/copy_heavy.jsonl: the copy-heavy workload of bench/learner/model_free_bench.py,
requests whose answers copy their input, from held-out text the demo pool never trained on.

    python -m bench.learner.build_copy_heavy [--eval-dir ../shared/data/eval]
                                     [--out bench/data/copy_heavy.jsonl]

Run once by hand; the benchmark reads only the vendored file (bench/data/SOURCES.md gives its
provenance and licences). Deterministic: the same inputs give the same bytes.

Kinds (`kind`), four records each, the benchmark interleaving them request by request:
- code_edit: a whole HumanEval function (prompt + canonical solution) and a small edit (rename
  the function or a parameter, add a comment line); the answer returns the whole function.
- quote_context: a PubMedQA abstract with its question, answered by quoting the abstract, and
  two Self-Instruct tasks that answer from or extract out of a given text.
- summary: PubMedQA abstracts to summarise in their own wording, and a Self-Instruct task that
  tabulates a text's participants.
- json_multiturn: three turns of the same extraction (a HumanEval function's signature as JSON
  with fixed keys); the first two answered (built here with `ast`), the third left to the model,
  so its answer repeats the structure of the two before.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
from pathlib import Path
from typing import Any

from bench.paths import DATA, REPO

DEFAULT_EVAL = REPO.parent / "shared" / "data" / "eval"
DEFAULT_OUT = DATA / "copy_heavy.jsonl"
PER_KIND = 4
SEED = 39  # issue 39
# Self-Instruct (eval only) tasks whose answers draw on their input text, picked by hand.
CHAT_QUOTE = ("user_oriented_task_102", "user_oriented_task_212")
CHAT_SUMMARY = ("user_oriented_task_191",)


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def record(rid: str, kind: str, messages: list[dict[str, str]],
           sources: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": rid, "kind": kind, "messages": messages,
            "sources": [f"{s['id']} ({s['source']})" for s in sources]}


# -- HumanEval ---------------------------------------------------------------------------------
def single_functions(humaneval: list[dict[str, Any]], lo: int, hi: int) -> list[dict[str, Any]]:
    """HumanEval records whose prompt defines one function with a docstring and whose whole
    function (prompt + solution) has lo..hi characters."""
    out = []
    for r in humaneval:
        try:
            tree = ast.parse(r["prompt"] + r["response"])
        except SyntaxError:
            continue
        defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        size = len(r["prompt"].strip()) + len(r["response"])
        if len(defs) == 1 and ast.get_docstring(defs[0]) and lo <= size <= hi:
            out.append(r)
    return out


def function_of(r: dict[str, Any]) -> ast.FunctionDef:
    tree = ast.parse(r["prompt"] + r["response"])
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef))


def code_edit(r: dict[str, Any], variant: int) -> dict[str, Any]:
    fn = function_of(r)
    code = (r["prompt"].strip("\n") + "\n" + r["response"]).rstrip() + "\n"
    params = [a.arg for a in fn.args.args]
    if variant % 3 == 1 and params:
        edit = (f"Rename the parameter `{params[0]}` to `{params[0]}_in` everywhere in the "
                "function below (signature, docstring and body), change nothing else, and "
                "return the whole edited function in a Python code block.")
    elif variant % 3 == 2:
        edit = ("Add the comment `# reviewed` as the first line of the body of the function "
                "below, change nothing else, and return the whole function in a Python code "
                "block.")
    else:
        edit = (f"Rename the function `{fn.name}` to `{fn.name}_v2`, change nothing else, and "
                "return the whole function in a Python code block.")
    return record(f"code_edit:{r['id']}", "code_edit",
                  [user(f"{edit}\n\n```python\n{code}```")], [r])


def signature_json(fn: ast.FunctionDef) -> str:
    doc = (ast.get_docstring(fn) or "").strip()
    summary = doc.split("\n\n")[0].split(". ")[0].replace("\n", " ").strip().rstrip(".")
    params = [{"name": a.arg, "type": ast.unparse(a.annotation) if a.annotation else None}
              for a in fn.args.args]
    return json.dumps({"name": fn.name, "parameters": params,
                       "returns": ast.unparse(fn.returns) if fn.returns else None,
                       "summary": summary}, indent=2)


def json_multiturn(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """Three functions: the first two turns answered, the third for the model."""
    ask = ("Extract the signature of this Python function as JSON with the keys name, "
           "parameters (a list of objects with name and type), returns and summary (the first "
           "sentence of its docstring). Answer with the JSON only.")
    messages: list[dict[str, str]] = []
    for i, r in enumerate(rs):
        head = ask if i == 0 else "The same for this function."
        messages.append(user(f"{head}\n\n```python\n{r['prompt'].strip()}\n```"))
        if i < len(rs) - 1:
            messages.append({"role": "assistant", "content": signature_json(function_of(r))})
    return record("json_multiturn:" + "+".join(r["id"] for r in rs), "json_multiturn",
                  messages, rs)


# -- PubMedQA and Self-Instruct ----------------------------------------------------------------
def abstract_and_question(r: dict[str, Any]) -> tuple[str, str]:
    abstract, _, rest = r["prompt"].partition("\n\nQuestion: ")
    return abstract.strip(), rest.split("\n")[0].strip()


def quote_pubmed(r: dict[str, Any]) -> dict[str, Any]:
    abstract, question = abstract_and_question(r)
    text = (f"{abstract}\n\nQuestion: {question}\nAnswer the question using only the abstract "
            "above: quote, word for word, the sentences of the abstract that support your "
            "answer, then answer yes, no or maybe.")
    return record(f"quote_context:{r['id']}", "quote_context", [user(text)], [r])


def summary_pubmed(r: dict[str, Any]) -> dict[str, Any]:
    abstract, _ = abstract_and_question(r)
    text = ("Summarize the following abstract in three sentences, keeping its own wording "
            f"where you can.\n\n{abstract}")
    return record(f"summary:{r['id']}", "summary", [user(text)], [r])


def chat_task(r: dict[str, Any], kind: str) -> dict[str, Any]:
    return record(f"{kind}:{r['id']}", kind, [user(r["prompt"])], [r])


def build(eval_dir: Path, demo_prompts: Path) -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    trained_eval = {json.loads(line)["id"] for line in demo_prompts.read_text().splitlines()
                    if line.strip()}
    # PubMedQA test records the demo's own held-out prompts do not use, of moderate length
    pubmed = [r for r in read(eval_dir / "medical.jsonl")
              if r["id"] not in trained_eval and 800 <= len(r["prompt"]) <= 1300]
    pubmed = rng.sample(pubmed, 5)
    chat = {r["id"]: r for r in read(eval_dir / "ood_chat.jsonl")}
    humaneval = read(eval_dir / "ood_humaneval.jsonl")
    code = rng.sample(single_functions(humaneval, 250, 700), PER_KIND)
    used = {r["id"] for r in code}
    sig = rng.sample([r for r in single_functions(humaneval, 150, 450) if r["id"] not in used],
                     3 * PER_KIND)
    by_kind = {
        "code_edit": [code_edit(r, i) for i, r in enumerate(code)],
        "quote_context": [quote_pubmed(pubmed[0]), chat_task(chat[CHAT_QUOTE[0]], "quote_context"),
                          chat_task(chat[CHAT_QUOTE[1]], "quote_context"), quote_pubmed(pubmed[1])],
        "summary": [summary_pubmed(pubmed[2]), chat_task(chat[CHAT_SUMMARY[0]], "summary"),
                    summary_pubmed(pubmed[3]), summary_pubmed(pubmed[4])],
        "json_multiturn": [json_multiturn(sig[3 * i : 3 * i + 3]) for i in range(PER_KIND)],
    }
    return [rs[i] for i in range(PER_KIND) for rs in by_kind.values()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL)
    ap.add_argument("--demo-prompts", type=Path,
                    default=REPO / "demo" / "pool" / "eval_prompts.jsonl")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    rows = build(args.eval_dir, args.demo_prompts)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                        encoding="utf-8")
    print(f"wrote {len(rows)} records to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
