#!/usr/bin/env python3
"""Generates conversations.json: the retrieval evaluation set (docs/evaluation.md).

Each conversation is between two people over several dated sessions of 10-30 turns: chit-chat
and filler that keeps naming both speakers, distractor turns that share words with the facts,
and the facts the questions are about. Questions come in six categories:

  single-hop        one turn answers it
  multi-hop         two turns, in different sessions, answer it together
  temporal          "when ..." — the turn that tells it (its session's date answers it)
  preference        a like, dislike or habit of a speaker
  knowledge-update  a fact that changed: the later turn is the evidence
  abstention        something never said: the evidence is empty

Questions paraphrase their evidence (a greyhound is asked about as "the dog") often enough that
neither word overlap nor hashed-token embeddings find every answer, and are written as users
write them ("what did", "when was"). The seed is fixed: the output is the same on every run.
Run: python3 eval/retrieval/gen.py > eval/retrieval/conversations.json
"""
import json
import random
from datetime import datetime, timedelta, timezone

rng = random.Random(59)

PEOPLE = ["Maria", "Tom", "Aisha", "Kenji", "Lucia", "Omar", "Priya", "Jonas", "Elena", "Marcus", "Sofia",
          "Daniel", "Hana", "Ravi", "Chloe", "Mateo", "Ingrid", "Samuel", "Yuki", "Fatima", "Liam", "Nadia",
          "Oscar", "Grace", "Tariq", "Mei", "Pablo", "Zoe", "Andrei", "Leila"]

PETS = [("greyhound", "Pepper"), ("beagle", "Biscuit"), ("tabby kitten", "Mochi"), ("parrot", "Kiwi"),
        ("labrador", "Juno"), ("rabbit", "Clover")]
CITIES = ["Porto", "Lyon", "Krakow", "Seville", "Ghent", "Bologna", "Tallinn", "Valencia", "Leipzig", "Bergen"]
COMPANIES = ["a logistics startup", "the city library", "a solar panel company", "a dental clinic",
             "a video game studio", "an insurance firm", "a children's hospital", "a coffee roastery"]
INSTRUMENTS = [("cello", "string instrument"), ("trumpet", "brass instrument"), ("ukulele", "small guitar-like instrument"),
               ("piano", "keyboard instrument"), ("flute", "woodwind instrument")]
SPORTS = [("half marathon", "long-distance race"), ("triathlon", "swim-bike-run race"),
          ("10k charity run", "charity race"), ("mountain bike race", "cycling race")]
BOOKS = [("Middlemarch", "Victorian novel"), ("Dune", "science fiction epic"), ("The Remains of the Day", "novel about a butler"),
         ("Sapiens", "history of humankind"), ("Kitchen Confidential", "memoir by a chef")]
FOODS = [("cilantro", "herb"), ("olives", "salty snack"), ("mushrooms", "fungi"), ("blue cheese", "cheese"),
         ("eggplant", "vegetable")]
DRINKS = [("oat milk flat white", "coffee order"), ("green tea", "hot drink"), ("sparkling water with lime", "drink"),
          ("double espresso", "coffee order")]
CARS = [("an old red Volvo", "a secondhand electric Nissan"), ("a tiny Fiat", "a used Toyota hybrid"),
        ("a rusty pickup", "a cargo bike"), ("a grey Golf", "an electric Kia")]
JOBS = [("a barista", "a junior data analyst"), ("a line cook", "a sous chef"), ("a bank teller", "a mortgage advisor"),
        ("a substitute teacher", "a full-time maths teacher"), ("a warehouse picker", "a shift supervisor")]
HOBBIES = [("pottery", "throwing bowls on a wheel"), ("rock climbing", "bouldering at the gym"),
           ("birdwatching", "spotting herons at the lake"), ("baking sourdough", "feeding my starter"),
           ("chess", "playing online blitz games")]
RELATIVES = [("sister", "Lena"), ("brother", "Nico"), ("cousin", "Ada"), ("uncle", "Victor"), ("aunt", "Rosa")]
ALLERGIES = ["peanuts", "shellfish", "penicillin", "cats", "pollen"]


def single_hop(a, b):
    pet, pname = rng.choice(PETS)
    inst, inst_d = rng.choice(INSTRUMENTS)
    book, book_d = rng.choice(BOOKS)
    city = rng.choice(CITIES)
    rel, rname = rng.choice(RELATIVES)
    allergy = rng.choice(ALLERGIES)
    return [
        ("%s, guess what, we took in a %s from the shelter and called him %s." % (b, pet, pname),
         "What is the name of the animal %s adopted?" % a, pname,
         ["My neighbour's animal keeps escaping, %s, it drives me mad." % b]),
        ("I've started taking %s lessons on Thursdays, my fingers hurt so much." % inst,
         "What did %s start learning to play?" % a, inst,
         ["Thursdays are always busy for me, %s, lessons for the kids and all that." % b]),
        ("I just finished %s, %s, honestly it took me all winter." % (book, b),
         "Which book did %s read over the winter?" % a, book,
         ["%s, I finished painting the bathroom, it took all weekend." % b]),
        ("My %s %s is moving to %s for her new job." % (rel, rname, city),
         "Where is %s's %s relocating?" % (a, rel), city,
         ["%s said the new job sounds stressful, but whatever." % b]),
        ("Turns out I'm allergic to %s, the doctor confirmed it on Monday." % allergy,
         "What allergy was %s diagnosed with?" % a, allergy,
         ["The doctor's office was packed on Monday, %s, I waited ages." % b]),
    ]


def preference(a, b):
    food, food_d = rng.choice(FOODS)
    drink, drink_d = rng.choice(DRINKS)
    hobby, hobby_d = rng.choice(HOBBIES)
    return [
        ("Please never put %s in my food, %s, I can't stand the taste." % (food, b),
         "What food does %s dislike?" % a, food,
         ["%s, the food at that place was fine, nothing special about the taste." % b]),
        ("Every morning I grab a %s on the way in, it's my little ritual." % drink,
         "What does %s usually drink in the mornings?" % a, drink,
         ["Mornings are rough, %s, I'm never awake on the way in." % b]),
        ("Honestly my favourite way to spend a Sunday is %s, %s." % (hobby_d, b),
         "How does %s like to spend weekends?" % a, hobby,
         ["%s, Sunday was a write-off, I slept till noon." % b]),
        ("I always pick the window seat when I fly, I hate being stuck in the aisle.",
         "Which seat does %s prefer on planes?" % a, "window seat",
         ["%s, the plane was delayed two hours, classic." % b]),
    ]


def temporal(a, b):
    sport, sport_d = rng.choice(SPORTS)
    return [
        ("%s, I did it, I ran the %s this morning and didn't stop once!" % (b, sport),
         "When did %s complete the %s?" % (a, sport_d), sport,
         ["My knees hurt after running for the bus this morning, %s." % b]),
        ("We signed the lease on the new flat today, %s, keys on Friday." % b,
         "When was the rental contract for %s's apartment signed?" % a, "lease",
         ["%s, our landlord still hasn't fixed the heating in the flat." % b]),
        ("I had my wisdom tooth pulled yesterday, my face is huge.",
         "When did %s go to the dentist for the extraction?" % a, "wisdom tooth",
         ["%s, my face was red all day from the sun yesterday." % b]),
        ("Big news %s, we got engaged last night at the lake!" % b,
         "When was %s's engagement?" % a, "engaged",
         ["The lake was freezing last night, %s, nobody went in." % b]),
    ]


def update(a, b):
    old_car, new_car = rng.choice(CARS)
    old_job, new_job = rng.choice(JOBS)
    c1, c2 = rng.sample(CITIES, 2)
    old_co, new_co = rng.sample(COMPANIES, 2)
    return [
        (("I still drive %s, it refuses to die." % old_car,
          "Sold the old one, %s, I'm getting around in %s now." % (b, new_car)),
         "What vehicle does %s use these days?" % a, new_car),
        (("Work's fine, I'm still %s, same as always." % old_job,
          "%s, I got promoted, I'm %s now!" % (b, new_job)),
         "What is %s's current role?" % a, new_job),
        (("We've been living in %s for three years now." % c1,
          "The move went fine, %s, we're settled in %s now." % (b, c2)),
         "Which city does %s live in at the moment?" % a, c2),
        (("I'm still at %s, the hours are long." % old_co,
          "I handed in my notice, %s, starting at %s next week." % (b, new_co)),
         "Where is %s employed now?" % a, new_co),
    ]


def multi_hop(a, b):
    rel, rname = rng.choice(RELATIVES)
    city = rng.choice(CITIES)
    pet, pname = rng.choice(PETS)
    inst, _ = rng.choice(INSTRUMENTS)
    return [
        (("My %s %s is a nurse, she works nights." % (rel, rname),
          "%s is visiting us from %s next month, %s." % (rname, city, b)),
         "Where does %s's relative who works night shifts live?" % a, city),
        (("%s the %s chewed through my headphones, %s." % (pname, pet, b),
          "Took %s to the vet, turns out he swallowed a sock too." % pname),
         "What happened when %s's pet saw the vet?" % a, "swallowed a sock"),
        (("My teacher for %s is called Mrs Okafor, very strict." % inst,
          "Mrs Okafor entered me for a recital in June, %s!" % b),
         "What did %s's music teacher sign them up for?" % a, "a recital in June"),
    ]


ABSTAIN = [
    "What is the name of %s's horse?",
    "When did %s fly to Australia?",
    "Which university did %s's grandfather attend?",
    "What colour is %s's sailboat?",
    "How many goals did %s score in the cup final?",
    "What did %s order at the sushi restaurant in Tokyo?",
    "Who did %s meet at the opera?",
    "What tattoo did %s get on their arm?",
]

FILLER = [
    "Hey {o}! How's it going?", "Morning {o}, did you sleep at all?", "Haha, that's so true, {o}.",
    "Ugh, this week, {o}. Don't ask.", "Same here honestly.", "Oh no, {o}, that sounds awful.",
    "Wait, really? Tell me more, {o}.", "lol", "I know right?", "Anyway, how's your week been, {o}?",
    "The weather has been terrible here, {o}.", "I'm so tired, {o}, work is endless.",
    "Did you watch the match last night, {o}?", "We should get coffee soon, {o}.",
    "Sorry {o}, I was in a meeting.", "That's hilarious, {o}.", "Okay okay, I'll stop complaining.",
    "Talk later, {o}, I have to run.", "Good night {o}!", "Thanks {o}, that means a lot.",
    "Did I tell you about my neighbour, {o}? Never mind.", "Traffic was a nightmare again, {o}.",
    "I've been meaning to call you, {o}.", "Hmm, not sure, {o}. Maybe?",
    "My phone died halfway through the day, {o}.", "Lunch was leftovers again, {o}.",
    "It's been ages, {o}!", "Same old, same old, {o}.", "Yeah, {o}, I hear you.",
    "Honestly {o}, I need a holiday.", "Ha, classic {o}.", "No worries at all, {o}.",
]


# Generated small talk: everyday acts that share words with the facts (food, morning, plane,
# music, dog, work, weekend) without answering any question.
ACTS = ["cooked", "tried", "watched", "cleaned", "fixed", "bought", "lost", "found", "booked", "cancelled",
        "borrowed", "returned", "painted", "ordered", "skipped"]
OBJECTS = ["some pasta", "a new show", "the garage", "the kitchen sink", "new running shoes", "my keys",
           "an old photo album", "a table for Friday", "the gym membership", "a food delivery", "a plane ticket home",
           "tickets for a music festival", "a toy for the neighbour's dog", "a bike helmet", "the work laptop charger",
           "a cheap lamp", "a birthday cake", "the balcony plants", "a book for my mum", "the morning train",
           "a pair of sunglasses", "the weekend market", "a jigsaw puzzle", "new curtains", "the car insurance"]
WHEN = ["this morning", "last night", "on Sunday", "yesterday", "over the weekend", "after work", "at lunch",
        "on the way home", "before the meeting"]
SHAPES = ["I {a} {x} {w}, {o}.", "{o}, I {a} {x} {w}, don't laugh.", "Finally {a} {x} {w}.",
          "My flatmate {a} {x} {w}, {o}, typical.", "Did you ever get {x}, {o}? I {a} mine {w}."]


def filler(speaker, other):
    if rng.random() < 0.45:
        return rng.choice(FILLER).format(o=other)
    return rng.choice(SHAPES).format(a=rng.choice(ACTS), x=rng.choice(OBJECTS), w=rng.choice(WHEN), o=other)


def conversation(ci):
    a, b = rng.sample(PEOPLE, 2)
    cid = "conv%02d" % (ci + 1)
    nsess = rng.randint(5, 7)
    start = datetime(2024, 1, 8, tzinfo=timezone.utc) + timedelta(days=rng.randint(0, 300))
    dates = [start + timedelta(days=9 * k + rng.randint(0, 5), hours=rng.randint(8, 21)) for k in range(nsess)]
    # Facts: (category, [(session, speaker, text)], question, answer) and distractors per session.
    placed = {k: [] for k in range(nsess)}  # session -> [(speaker, text, tag)]
    questions = []
    qn = [0]

    def place(sess, speaker, text, tag):
        placed[sess].append((speaker, text, tag))

    def ask(cat, tags, q, ans, asked=None):
        qn[0] += 1
        questions.append({"id": "%s-q%02d" % (cid, qn[0]), "conversation": cid, "question": q, "answer": ans,
                          "evidence": tags, "category": cat, **({"asked_at": asked} if asked else {})})

    tagn = [0]
    used = set()  # (category, template index): the two speakers never get the same fact

    def pick(cat, items, n):
        free = [i for i in range(len(items)) if (cat, i) not in used]
        chosen = rng.sample(free, n)
        used.update((cat, i) for i in chosen)
        return [items[i] for i in chosen]

    def tag():
        tagn[0] += 1
        return "fact%d" % tagn[0]

    for who, other in ((a, b), (b, a)):
        for ev, q, ans, dis in pick("single-hop", single_hop(who, other), 2):
            s = rng.randrange(nsess)
            t = tag()
            place(s, who, ev, t)
            for d in dis:
                place(rng.randrange(nsess), other, d, None)
            ask("single-hop", [t], q, ans)
        for ev, q, ans, dis in pick("preference", preference(who, other), 1 + (who == a)):
            s = rng.randrange(nsess)
            t = tag()
            place(s, who, ev, t)
            for d in dis:
                place(rng.randrange(nsess), other, d, None)
            ask("preference", [t], q, ans)
        for ev, q, ans, dis in pick("temporal", temporal(who, other), 1 + (who == b)):
            s = rng.randrange(nsess)
            t = tag()
            place(s, who, ev, t)
            for d in dis:
                place(rng.randrange(nsess), other, d, None)
            ask("temporal", [t], q, dates[s].date().isoformat())
        for (old, new), q, ans in pick("knowledge-update", update(who, other), 1 + (who == a)):
            s1 = rng.randrange(0, nsess - 1)
            s2 = rng.randrange(s1 + 1, nsess)
            t1, t2 = tag(), tag()
            place(s1, who, old, t1)
            place(s2, who, new, t2)
            ask("knowledge-update", [t2], q, ans, (dates[-1] + timedelta(days=1)).isoformat().replace("+00:00", "Z"))
        for (first, second), q, ans in pick("multi-hop", multi_hop(who, other), 1):
            s1 = rng.randrange(0, nsess - 1)
            s2 = rng.randrange(s1 + 1, nsess)
            t1, t2 = tag(), tag()
            place(s1, who, first, t1)
            place(s2, who, second, t2)
            ask("multi-hop", [t1, t2], q, ans)
        for q in pick("abstention", ABSTAIN, 1):
            ask("abstention", [], q % who, None)

    sessions = []
    ids = {}
    for k in range(nsess):
        items = placed[k]
        n = rng.randint(max(8, 14 - len(items)), max(14 - len(items), 29 - len(items)))
        turns = []
        speakers = [a, b]
        for i in range(n):
            sp = speakers[i % 2]
            turns.append((sp, filler(sp, speakers[(i + 1) % 2]), None))
        for it in items:
            turns.insert(rng.randrange(1, len(turns) + 1), it)
        out = []
        for j, (sp, text, t) in enumerate(turns):
            tid = "%s-s%d-t%02d" % (cid, k + 1, j + 1)
            if t:
                ids[t] = tid
            out.append({"id": tid, "speaker": sp, "text": text})
        sessions.append({"id": "%s-s%d" % (cid, k + 1), "date": dates[k].isoformat().replace("+00:00", "Z"), "turns": out})
    for q in questions:
        q["evidence"] = [ids[t] for t in q["evidence"]]
        if q["answer"] is None:
            del q["answer"]
    return {"id": cid, "user_id": "user-%s" % a.lower(), "sessions": sessions}, questions


convs, qs = [], []
for ci in range(44):
    c, q = conversation(ci)
    convs.append(c)
    qs.extend(q)
print(json.dumps({"conversations": convs, "questions": qs}, indent=1, ensure_ascii=False))
