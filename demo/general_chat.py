"""Synthesised general-chat prompts: the generalist's own data.

The HedgeSpec paper's generalist is trained on general chat and each specialist on one domain,
which is what makes a specialist win in its domain and the generalist win on average. The demo
mirrors that with everyday requests written for this project (no dataset, no prompt from
`data/eval/` or `data/ood/`): 80 topics outside the seven domains x 4 request templates.
A record's id carries a digest of its text, so editing a topic or a template never reuses a
stored rollout of the old prompt.
"""

from __future__ import annotations

import hashlib

from demo.records import Record

GENERAL = "general"

TOPICS: tuple[str, ...] = (
    "planning a weekend trip",
    "learning to play the guitar",
    "keeping houseplants alive",
    "saving money on groceries",
    "running a first 5k",
    "making friends in a new city",
    "writing a cover letter",
    "choosing a laptop",
    "training a puppy",
    "baking sourdough bread",
    "staying focused while working from home",
    "preparing for a job interview",
    "starting a vegetable garden",
    "decorating a small apartment",
    "learning a new language",
    "packing for a long flight",
    "hosting a dinner party",
    "choosing a good book",
    "taking better photos with a phone",
    "improving sleep",
    "organising a closet",
    "picking a birthday gift",
    "riding a bike in the city",
    "camping for the first time",
    "brewing coffee at home",
    "negotiating a salary",
    "keeping a journal",
    "learning to swim",
    "cleaning a kitchen quickly",
    "planning a wedding",
    "choosing running shoes",
    "making a budget spreadsheet",
    "moving to a new house",
    "caring for a cat",
    "playing chess",
    "watching the night sky",
    "painting with watercolors",
    "fixing a flat tire",
    "writing a short story",
    "volunteering in the community",
    "learning to cook rice",
    "choosing a podcast",
    "staying motivated at the gym",
    "travelling by train in Europe",
    "visiting a museum",
    "planting trees",
    "knitting a scarf",
    "buying a used car",
    "recycling at home",
    "making pancakes",
    "giving a toast",
    "hiking in the mountains",
    "building a birdhouse",
    "reading more books",
    "learning to dance",
    "walking a dog",
    "meditating",
    "renting an apartment",
    "making a smoothie",
    "decluttering a desk",
    "writing a thank-you note",
    "choosing a board game",
    "swimming in the ocean",
    "driving in the snow",
    "growing tomatoes",
    "sewing a button",
    "visiting Japan",
    "planning a road trip",
    "taking notes in class",
    "making tea",
    "painting a room",
    "going to a concert",
    "shopping for clothes",
    "keeping in touch with family",
    "teaching a child to read",
    "surfing",
    "making homemade pizza",
    "riding a horse",
    "choosing a phone plan",
    "planning a picnic",
)

TEMPLATES: tuple[str, ...] = (
    "Give me three tips for {t}.",
    "Write a short paragraph about {t}.",
    "What are the pros and cons of {t}?",
    "Explain {t} to a beginner in a few sentences.",
)


def general_records() -> list[Record]:
    """Every topic x template, topic-major (so the first n records span n/4 topics)."""
    records = []
    for i, topic in enumerate(TOPICS):
        for j, template in enumerate(TEMPLATES):
            prompt = template.format(t=topic)
            digest = hashlib.sha256(prompt.encode()).hexdigest()[:8]
            records.append(Record(f"general-{i:02d}-{j}-{digest}", GENERAL, prompt, ""))
    return records
