#!/usr/bin/env python3
"""Generates conversations.json: the graph evaluation set (docs/graph.md, Evaluation).

Each conversation has two or three sessions of turns (written as memories) and the graph an
extractor would have written from them: a subject entity, a functional relation whose object
changed between sessions (the old one is closed), with the date it changed. The turns speak as
people do: the change is told with a pronoun or a description and a relative date ("she
started last Monday"), so the answer needs the relation or its date; in a third of the
conversations the turns do name the new object, so memories alone answer some questions.
Run: python3 eval/graph/gen.py > eval/graph/conversations.json
"""
import json

# (subject, subject type, predicate, old object, new object, object type, hint naming it or not)
ROWS = [
    ("Lisbon store", "place", "managed_by", "Rui", "Marta", "person"),
    ("Porto warehouse", "place", "managed_by", "Helena", "Tiago", "person"),
    ("Ana Silva", "person", "lives_in", "Coimbra", "Braga", "place"),
    ("Bruno Costa", "person", "works_at", "Acme Foods", "Nortel Logistics", "organization"),
    ("Clara Mendes", "person", "reports_to", "Jorge", "Ines", "person"),
    ("Project Atlas", "project", "led_by", "Duarte", "Beatriz", "person"),
    ("Faro clinic", "place", "managed_by", "Paulo", "Sofia", "person"),
    ("Diego Ramos", "person", "lives_in", "Madrid", "Valencia", "place"),
    ("Elena Rossi", "person", "works_at", "Fiat Group", "Luxottica", "organization"),
    ("Support team", "team", "led_by", "Hugo", "Leonor", "person"),
    ("Marco Bianchi", "person", "reports_to", "Giulia", "Franco", "person"),
    ("Berlin office", "place", "managed_by", "Klaus", "Annika", "person"),
    ("Priya Nair", "person", "lives_in", "Pune", "Bangalore", "place"),
    ("Tom Becker", "person", "works_at", "Siemens", "Bosch", "organization"),
    ("Mobile app", "project", "owned_by", "Lena", "Jonas", "person"),
    ("Kenji Sato", "person", "reports_to", "Haruto", "Yui", "person"),
    ("Lyon bakery", "place", "managed_by", "Pierre", "Camille", "person"),
    ("Sara Lind", "person", "lives_in", "Uppsala", "Gothenburg", "place"),
    ("Omar Haddad", "person", "works_at", "Aramex", "Careem", "organization"),
    ("Billing service", "project", "owned_by", "Nadia", "Yusuf", "person"),
    ("Lucia Perez", "person", "reports_to", "Alvaro", "Carmen", "person"),
    ("Dublin pub", "place", "managed_by", "Sean", "Aoife", "person"),
    ("Noah Fischer", "person", "lives_in", "Zurich", "Basel", "place"),
    ("Mia Wong", "person", "works_at", "Grab", "Shopee", "organization"),
    ("Data platform", "project", "led_by", "Oscar", "Freya", "person"),
    ("Ivan Petrov", "person", "reports_to", "Dmitri", "Olga", "person"),
    ("Oslo gym", "place", "managed_by", "Erik", "Ingrid", "person"),
    ("Julia Novak", "person", "lives_in", "Brno", "Prague", "place"),
    ("Leo Martin", "person", "works_at", "Renault", "Airbus", "organization"),
    ("Search feature", "project", "owned_by", "Ravi", "Meera", "person"),
    ("Nina Kowalski", "person", "reports_to", "Tomasz", "Agnieszka", "person"),
    ("Cork cafe", "place", "managed_by", "Liam", "Siobhan", "person"),
]

# How the turns tell each predicate: first session names the old object; the later session
# tells the change, naming the new object only when named is true.
SAY = {
    "managed_by": ("{o} runs the {s} and keeps it in good shape.",
                   "Big change at the {s}: the new manager started {rel}, she came over from another branch.",
                   "Big change at the {s}: {n} took over as manager {rel}."),
    "lives_in": ("{s} has lived in {o} for years.",
                 "{s} finally moved {rel}, to the city where her sister lives.",
                 "{s} finally moved to {n} {rel}."),
    "works_at": ("{s} works at {o}, in operations.",
                 "{s} switched jobs {rel}; the new company is the one that sponsored the conference.",
                 "{s} switched jobs {rel} and now works at {n}."),
    "reports_to": ("{s} reports to {o} these days.",
                   "After the reorg {rel}, {s} has a new manager, the one who ran the offsite.",
                   "After the reorg {rel}, {s} reports to {n}."),
    "led_by": ("{o} leads the {s}.",
               "The {s} got a new lead {rel}, the person who wrote the migration plan.",
               "The {s} got a new lead {rel}: {n}."),
    "owned_by": ("{o} owns the {s}.",
                 "Ownership of the {s} moved {rel} to the engineer who fixed the outage.",
                 "Ownership of the {s} moved {rel} to {n}."),
}
QUESTION = {
    "managed_by": "Who manages the {s} now?",
    "lives_in": "Where does {s} live now?",
    "works_at": "Where does {s} work now?",
    "reports_to": "Who does {s} report to now?",
    "led_by": "Who leads the {s} now?",
    "owned_by": "Who owns the {s} now?",
}
RELATIVE = ["last Monday", "two weeks ago", "at the start of the month", "yesterday", "last spring"]

out = []
for i, (s, st, p, o, n, ot) in enumerate(ROWS):
    named = i % 3 == 2
    old_from = "2024-%02d-%02d" % (1 + i % 12, 1 + i % 27)
    new_from = "2025-%02d-%02d" % (1 + (i * 5) % 12, 2 + (i * 7) % 26)
    first, later_anon, later_named = SAY[p]
    later = (later_named if named else later_anon).format(s=s, n=n, rel=RELATIVE[i % len(RELATIVE)])
    pretty = p.replace("_", " ")
    out.append({
        "id": "c%02d" % (i + 1),
        "entities": [{"name": s, "type": st}, {"name": o, "type": ot}, {"name": n, "type": ot}],
        "relations": [
            {"subject": s, "predicate": p, "object": o, "functional": True, "valid_from": old_from + "T00:00:00Z",
             "fact": "%s %s %s" % (s, pretty, o)},
            {"subject": s, "predicate": p, "object": n, "functional": True, "valid_from": new_from + "T00:00:00Z",
             "fact": "%s %s %s" % (s, pretty, n)},
        ],
        "sessions": [
            {"id": "s1", "turns": [first.format(s=s, o=o), "Remind me to send %s the quarterly notes." % s]},
            {"id": "s2", "turns": ["Nothing new about %s this week." % s]},
            {"id": "s3", "turns": [later]},
        ],
        "questions": [
            {"query": QUESTION[p].format(s=s), "answer": n, "needs": "relation"},
            {"query": "Since what date does the current '%s' of %s hold?" % (pretty, s),
             "answer": new_from, "needs": "date"},
        ],
    })
print(json.dumps({"conversations": out}, indent=1))
