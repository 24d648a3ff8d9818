"""JSON extraction with a pydantic model, through the openai client, against `pymtp serve`.

    pip install 'pymtp-llm[server,agents]' openai
    pymtp serve --model-name smollm2 &           # the default model on http://127.0.0.1:8000
    python examples/extract_json.py [http://127.0.0.1:8000/v1]

The openai client turns the pydantic model into a JSON schema (response_format); the server
compiles it into a grammar that masks the draft tokens and the verified ones alike, so the
reply always parses, and speculation stays exact. Each response also carries pymtp's
speculation stats beside `usage`.
"""

import sys

from openai import OpenAI
from pydantic import BaseModel


class Person(BaseModel):
    name: str
    age: int
    city: str


TEXTS = [
    "Maria Lopez, 34, moved from Madrid to Lyon last spring, where she now teaches chemistry.",
    "At 61, retired pilot Tom Becker still flies gliders every weekend near his home in Denver.",
]


def extract(client: OpenAI, text: str) -> tuple[Person, dict]:
    """The person a text describes, and the server's speculation stats for the request."""
    model = client.models.list().data[0].id  # the one model the server serves
    response = client.chat.completions.parse(
        model=model,
        messages=[
            {"role": "system", "content": "Extract the person described by the user."},
            {"role": "user", "content": text},
        ],
        response_format=Person,
        max_tokens=100,
    )
    stats = (response.model_extra or {}).get("pymtp", {})
    return response.choices[0].message.parsed, stats


if __name__ == "__main__":
    base_url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000/v1"
    client = OpenAI(base_url=base_url, api_key="unused")  # no --api-key: any key will do
    people = []
    for text in TEXTS:
        person, stats = extract(client, text)
        people.append(person)
        print(f"{person.model_dump_json()}    ({stats.get('acceptance_rate', 0):.0%} of drafts accepted)")
