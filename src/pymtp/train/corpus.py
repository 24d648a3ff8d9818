"""Training text for the default model's NextN head, and its held-out split.

Three sources, all tokenized by the trunk's own tokenizer:

* code: the running interpreter's standard library (the held-out split of ``data.py``);
* chat: ChatML transcripts the trunk writes itself, answering a few hundred instructions
  composed from task templates and topics below;
* prose: continuations the trunk writes from short openings.

Self-distillation makes the text's author matter less than usual (the head learns the
trunk's distribution at every position), but the trunk's own text is what the head drafts
at serving time. One instruction or opening in ten (by a hash of its text) is held out.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import time
from pathlib import Path
from typing import cast

TASKS = [
    "Write a Python function that {code}.",
    "Explain {topic} to a beginner in a few sentences.",
    "Give three facts about {topic}.",
    "Write a short paragraph about {topic}.",
    "What are the advantages and disadvantages of {topic}?",
    "Write a short email to a colleague about {topic}.",
    "Summarize what you know about {topic} in a bulleted list.",
    "Write a haiku about {topic}.",
    "Answer briefly: why does {topic} matter?",
    "Write a short story that involves {topic}.",
    "Compare {topic} with something similar and explain the differences.",
    "Write a step-by-step guide related to {topic}.",
    "What are common misconceptions about {topic}?",
    "Write a short dialogue between two friends discussing {topic}.",
]
TOPICS = [
    "photosynthesis",
    "the water cycle",
    "black holes",
    "the French Revolution",
    "machine learning",
    "healthy sleep",
    "volcanoes",
    "the stock market",
    "climate change",
    "the human heart",
    "electric cars",
    "the Roman Empire",
    "honeybees",
    "the internet",
    "recycling",
    "gravity",
    "coffee",
    "the moon landing",
    "vaccines",
    "renewable energy",
    "the piano",
    "chess",
    "rainforests",
    "democracy",
    "earthquakes",
    "the printing press",
    "dinosaurs",
    "meditation",
    "bread baking",
    "the Olympic Games",
    "cloud computing",
    "ocean tides",
    "the immune system",
    "public libraries",
    "solar panels",
    "the Great Wall of China",
    "time management",
    "bicycles",
    "DNA",
    "museums",
    "the Renaissance",
    "glaciers",
    "antibiotics",
    "the Silk Road",
    "quantum computing",
    "urban gardening",
    "the human brain",
    "jazz music",
    "coral reefs",
    "space telescopes",
    "the Industrial Revolution",
    "sourdough starters",
    "wind turbines",
    "ancient Egypt",
    "photography",
    "the periodic table",
    "marathon running",
    "open source software",
    "migratory birds",
    "the theory of evolution",
    "nuclear power",
    "video games",
    "the Amazon river",
    "personal finance",
    "cybersecurity",
    "mountain climbing",
    "the Byzantine Empire",
    "plate tectonics",
    "electric guitars",
    "tea ceremonies",
    "self-driving cars",
    "the Cold War",
    "mushrooms",
    "3D printing",
    "the solar system",
    "learning a new language",
    "architecture",
    "recycling plastics",
    "the Vikings",
    "desert ecosystems",
    "smartphones",
    "the history of mathematics",
    "volunteering",
    "hurricanes",
    "remote work",
    "origami",
    "the human skeleton",
    "penguins",
    "public transportation",
    "the Moon",
]
CODE = [
    "reverses a string",
    "checks whether a number is prime",
    "computes the factorial of n",
    "returns the n-th Fibonacci number",
    "counts the vowels in a string",
    "merges two sorted lists",
    "removes duplicates from a list while keeping order",
    "finds the largest element of a list",
    "checks whether a string is a palindrome",
    "flattens a nested list",
    "converts Celsius to Fahrenheit",
    "reads a text file and counts its words",
    "returns the greatest common divisor of two numbers",
    "sorts a list of dictionaries by a key",
    "computes the mean and median of a list",
    "checks whether two strings are anagrams",
    "implements binary search",
    "parses a CSV line",
    "groups words by their first letter",
    "validates an email address with a regular expression",
    "counts how often each word appears in a text",
    "transposes a matrix given as a list of lists",
    "converts a Roman numeral to an integer",
    "checks whether brackets in a string are balanced",
    "returns all permutations of a list",
    "computes the dot product of two vectors",
    "finds the second largest number in a list",
    "splits a list into chunks of size n",
    "rotates a list by k positions",
    "converts a binary string to an integer",
    "implements a stack class with push and pop",
    "implements a simple queue using two stacks",
    "computes the power set of a set",
    "finds the longest common prefix of a list of strings",
    "returns the prime factors of a number",
    "implements bubble sort",
    "implements merge sort",
    "implements quicksort",
    "counts the lines of a file that contain a given word",
    "returns a dictionary inverted (values become keys)",
    "checks whether a year is a leap year",
    "capitalizes the first letter of every word",
    "computes the running sum of a list",
    "finds the index of the first duplicate in a list",
    "computes the Levenshtein distance between two strings",
    "parses a date string into a datetime object",
    "downloads a web page and counts its links",
    "generates a random password",
    "computes the area of a circle from its radius",
    "finds all pairs in a list that sum to a target",
]
OPENINGS = [
    "The history of {topic} begins",
    "Most people do not realize that {topic}",
    "In this article, we look at {topic}",
    "When I first learned about {topic},",
    "Scientists have long studied {topic}",
    "Here is a simple guide to {topic}.",
    "There are many reasons why {topic}",
    "A brief overview of {topic}:",
]


def held_out(text: str, mod: int = 10) -> bool:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % mod == 0


def instructions(seed: int = 0) -> list[str]:
    """Every instruction (code tasks x code subjects, other tasks x topics), shuffled by seed."""
    out = [TASKS[0].format(code=c) for c in CODE]
    out += [t.format(topic=s) for t, s in itertools.product(TASKS[1:], TOPICS)]
    random.Random(seed).shuffle(out)
    return out


def openings(seed: int = 0) -> list[str]:
    out = [o.format(topic=t) for o, t in itertools.product(OPENINGS, TOPICS)]
    random.Random(seed).shuffle(out)
    return out


def prompt_tokens(model, kind: str, src: str) -> list[int]:
    """A chat instruction in the model's chat template, or a prose opening as it is."""
    prompt = model.apply_chat_template([{"role": "user", "content": src}]) if kind == "chat" else src
    return model.tokenize(prompt, add_special=False, parse_special=True)


def generate_texts(model, out: Path, *, n_chat: int, n_prose: int, max_tokens: int, seed: int) -> Path:
    """Write the trunk's chat answers and prose continuations as JSON lines (token ids).

    Training items are sampled (T=0.7, top-p 0.9) for variety; held-out items are greedy,
    the text acceptance is measured on."""
    import pymtp

    rng = random.Random(seed)
    jobs = [("chat", s) for s in instructions(seed)[:n_chat]] + [("prose", s) for s in openings(seed)[:n_prose]]
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        for i, (kind, src) in enumerate(jobs):
            held = held_out(src)
            ptoks = prompt_tokens(model, kind, src)
            r = pymtp.generate(
                ptoks,
                model,
                max_tokens=max_tokens,
                speculative=False,
                temperature=0.0 if held else 0.7,
                top_p=0.9,
                seed=rng.randrange(1 << 30),
            )
            r = cast(pymtp.GenerationResult, r)  # one prompt, one result
            f.write(
                json.dumps({"kind": kind, "source": src, "held_out": held, "prompt": ptoks, "completion": r.tokens})
                + "\n"
            )
            if i % 25 == 0:
                print(
                    f"  generated {i + 1}/{len(jobs)} ({kind}, {len(r.tokens)} tokens, "
                    f"{r.stats.tokens_per_second:.0f} tok/s)",
                    flush=True,
                )
    return out


def read_texts(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def code_prompts(model, *, n: int, seed: int, n_tokens: int = 64) -> list[tuple[bool, list[int]]]:
    """(held_out, tokens) openings cut from stdlib files at a line start, for the trunk to
    continue: training files give training items, held-out files held-out ones."""
    from . import data

    rng = random.Random(seed)
    train_files, held_files = data.split_files()
    out = []
    for held, files, count in ((False, train_files, n - n // 10), (True, held_files, n // 10)):
        files = list(files)
        rng.shuffle(files)
        taken = 0
        for rel in files:
            if taken == count:
                break
            text = data.read_text(rel)
            if not text or len(text) < 400:
                continue
            starts = [i + 1 for i, c in enumerate(text[:-200]) if c == "\n"]
            if not starts:
                continue
            toks = model.tokenize(text[rng.choice(starts) :], add_special=False)[:n_tokens]
            if len(toks) == n_tokens:
                out.append((held, toks))
                taken += 1
    return out


def generate_many(
    model, out: Path, *, n_code: int, max_tokens: int, seed: int, batch: int = 64, greedy_share: float = 0.5
) -> Path:
    """More of the trunk's own text, `batch` prompts to a pymtp.generate call (8 decode
    together, a finished one's slot takes the next): every instruction (chat) and opening
    (prose), plus n_code continuations of stdlib code. Held-out items are greedy; a
    `greedy_share` of the training items too (acceptance is measured and served greedily),
    the rest sampled at T=0.7, top-p 0.9 for variety."""
    import pymtp

    rng = random.Random(seed)
    jobs = []
    for kind, sources in (("chat", instructions(seed)), ("prose", openings(seed))):
        jobs += [(kind, src, held_out(src), prompt_tokens(model, kind, src)) for src in sources]
    for held, toks in code_prompts(model, n=n_code, seed=seed):
        jobs.append(("codegen", model.detokenize(toks[:8]), held, toks))
    is_greedy = [held or rng.random() < greedy_share for _, _, held, _ in jobs]
    greedy = [j for j, g in zip(jobs, is_greedy) if g]
    sampled = [j for j, g in zip(jobs, is_greedy) if not g]
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")  # whole chunks written so far: a rerun goes on from there
    have = partial.read_text().splitlines(keepends=True) if partial.exists() else []
    done = 0
    with open(partial, "w") as f:
        for group, temp in ((greedy, 0.0), (sampled, 0.7)):
            for i in range(0, len(group), batch):
                chunk = group[i : i + batch]
                seed_ = rng.randrange(1 << 30)
                if done + len(chunk) <= len(have):
                    f.writelines(have[done : done + len(chunk)])
                    done += len(chunk)
                    continue
                t0 = time.time()
                rs = pymtp.generate(
                    [j[3] for j in chunk],
                    model,
                    max_tokens=max_tokens,
                    speculative=False,
                    temperature=temp,
                    top_p=0.9,
                    seed=seed_,
                )
                rs = cast("list[pymtp.GenerationResult]", rs)  # a list of prompts, a list of results
                for (kind, src, held, ptoks), r in zip(chunk, rs):
                    f.write(
                        json.dumps(
                            {
                                "kind": kind,
                                "source": src,
                                "held_out": held,
                                "prompt": list(ptoks),
                                "completion": r.tokens,
                                "temperature": temp,
                            }
                        )
                        + "\n"
                    )
                done += len(chunk)
                f.flush()
                print(
                    f"  generated {done}/{len(jobs)} (T={temp}, {sum(len(r.tokens) for r in rs)} tokens in "
                    f"{time.time() - t0:.1f} s)",
                    flush=True,
                )
    partial.replace(out)
    return out
