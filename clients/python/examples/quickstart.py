"""Working memory, semantic memory, preferences and context. Run with STRATA_URL and
STRATA_API_KEY (an agent key) set:  /usr/bin/python3 clients/python/examples/quickstart.py"""

import uuid

import strata

client = strata.Strata()
session, user = f"chat-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}"

s = client.put_state(session, {"draft": "v1"}, user_id=user)
s = client.patch_state(session, {"tone": "formal"}, if_match=s["version"])
try:
    client.put_state(session, {"draft": "v0"}, if_match=1)  # stale ETag
except strata.Conflict as e:
    print("conflict, current:", e.current)
client.post_message(session, "user", "Cut a 30 s trailer")
client.post_message(session, "assistant", "On it")
for turn in client.list_messages(session):
    print(turn["seq"], turn["role"], turn["content"])

client.create_memory("Prefers 16:9 trailers with subtitles", user_id=user, kind="preference")
hits = client.search_memories("aspect ratio", user_id=user, kinds=["preference"], top_k=3)
print("recalled:", [h["memory"]["text"] for h in hits["items"]])
client.put_kv("prefs", "lang", "en", user_id=user)
print("lang:", client.get_kv("prefs", "lang", user_id=user)["value"])

ctx = client.context(query="trailer style", user_id=user, max_tokens=800)
print(f"context: {ctx['tokens']} tokens")

try:
    client.put_state(session, {}, ttl_seconds=-1)
except strata.ValidationError as e:
    print("invalid:", e.status, e.locations)
