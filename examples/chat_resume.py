"""A multi-turn chat that saves its state and resumes it in a new session.

    python examples/chat_resume.py [DIR]

The conversation goes to DIR/conversation.json (the messages) and DIR/conversation.npz (the
model's caches for them: session.save_state). A new session - after a restart, in another
process - loads both and continues: the cached positions are not read again, so the next
turn starts at once. The file is checked against the model before it is used.
"""

import json
import sys
import tempfile
from pathlib import Path

import pymtp

folder = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
messages = [{"role": "system", "content": "You are a concise assistant."}]

# First session: two turns, then save the messages and the caches.
with pymtp.load() as session:
    for question in ["Give me a name for a black cat.", "Why that name?"]:
        messages.append({"role": "user", "content": question})
        reply = pymtp.chat(messages, session, max_tokens=48)
        messages.append({"role": "assistant", "content": reply.text})
        print(f"user:      {question}\nassistant: {reply.text}\n")
    (folder / "conversation.json").write_text(json.dumps(messages))
    session.save_state(folder / "conversation.npz")

# Later, a new session: load the state and go on where the conversation stopped.
messages = json.loads((folder / "conversation.json").read_text())
messages.append({"role": "user", "content": "Suggest one for a white cat too."})
with pymtp.load() as session:
    saved = session.load_state(folder / "conversation.npz")
    reply = pymtp.chat(messages, session, max_tokens=48)
print(f"user:      {messages[-1]['content']}\nassistant: {reply.text}\n")
stats = reply.stats
print(
    f"resumed: {stats.n_reused} of {stats.n_prompt} prompt positions came from the saved file "
    f"({saved} saved); prompt read in {stats.t_prefill * 1000:.0f} ms"
)
