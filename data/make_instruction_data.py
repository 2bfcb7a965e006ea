"""Generate the bundled instruction data: support tickets and their replies as conversations.

Instruction tuning needs conversations whose replies depend on what was asked, in a way a tiny
model can pick up in a few hundred steps. This script writes, from templates and a fixed seed
(the output is byte-for-byte reproducible):

* ``instructions/support_conversations.jsonl``: one conversation per line in the ``messages``
  format, ``{"messages": [{"role": "user", "content": "..."}, {"role": "assistant", ...}]}``,
  for the fictional note-taking app "Lumen Notes" of the sample corpus. A ticket describes a
  problem with one of 14 topics (sync, PDF export, passwords, billing, ...) in the customer's
  words; the reply names the topic and gives that topic's steps, like the corpus replies. Some
  conversations open with a system turn, and a "brief" system turn asks for a short reply in
  one paragraph instead of a numbered list; some go on for more turns (a follow-up on the same
  problem, a second question on another topic, or a thank-you); a small share is in German,
  Spanish or French; a few tickets carry an e-mail address or a phone number (fictional:
  example.com, and the UK's range for drama) for the pipeline's PII scrubbing to replace.

Usage: ``python data/make_instruction_data.py [--out-dir DIR] [--seed N] [--conversations N]``.
Only the Python standard library is used; the same seed and count always give the same bytes.
The product, its topics and the reply pieces come from ``make_sample_corpus.py`` beside it.
"""

import argparse
import json
import random
import unicodedata
from pathlib import Path

from make_sample_corpus import (
    AGENTS,
    CLOSINGS,
    CUSTOMERS,
    GREETINGS,
    OPENERS,
    PRODUCT,
    STEP_LEADS,
    TOPICS,
    fill,
    make_versions,
    write_text,
)

OUTPUT = Path("instructions") / "support_conversations.jsonl"

DEVICES = [
    "Windows laptop",
    "MacBook",
    "iPhone",
    "Android phone",
    "iPad",
    "Chromebook",
    "Linux desktop",
    "Android tablet",
    "Surface tablet",
    "work PC",
    "Pixel phone",
    "Galaxy tablet",
]

# What customers write about each topic (the keys of make_sample_corpus.TOPICS): the i-th ticket of
# a topic is the problem the topic's i-th issue phrasing names, which the reply quotes.
TICKETS = {
    "sync": [
        "My notes are not syncing between my {device} and my phone.",
        "Sync keeps failing on my laptop.",
        "I keep getting a sync error on my {device}.",
        "Changes I make on my {device} never show up on my phone.",
    ],
    "pdf": [
        "Exporting a notebook to PDF on my {device} takes forever and then fails.",
        "When I export a note to PDF on my {device}, I get blank pages.",
        "PDF export leaves out all the images in my notes.",
        "The Export to PDF button is greyed out on my {device}.",
    ],
    "password": [
        "The password reset link says it has expired.",
        "I asked for a password reset but the email never arrived.",
        "I'm locked out of my account after too many attempts.",
        "How do I change my password on my {device}?",
    ],
    "billing": [
        "I'd like a refund for my subscription.",
        "I was charged twice for my Pro plan this month.",
        "There is a charge from {product} on my card that I don't recognise.",
        "How do I cancel my Pro plan before it renews?",
    ],
    "shortcuts": [
        "I have a question about the keyboard shortcuts on my {device}.",
        "Keyboard shortcuts stopped working on my {device}.",
        "Can I change the keyboard shortcuts? One of them clashes with another app.",
        "Is there a keyboard shortcut to create a new note?",
    ],
    "offline": [
        "How do I use {product} offline on my {device}?",
        "The edits I made offline on my {device} were not saved.",
        "My notes disappear when I lose my internet connection.",
        "I need my notes on a flight tomorrow. How do I keep them on my {device}?",
    ],
    "attachments": [
        "My attachments are too large to upload.",
        "What is the size limit for attachments?",
        "I can't attach a 40 MB video to a note.",
        "Files fail to attach on my {device}, the upload just stops.",
    ],
    "dark_mode": [
        "Dark mode looks wrong on my {device}.",
        "Dark mode doesn't follow my system setting on my {device}.",
        "Some of my notes are unreadable in dark mode.",
        "How do I switch to the dark theme?",
    ],
    "sharing": [
        "How do I share a notebook from my {device}?",
        "My team can't open the notebook I shared with them.",
        "I shared a notebook with the wrong person. How do I change who can see it?",
        "How do I invite people to edit my notes?",
    ],
    "import": [
        "I want to bring my old notes into {product}.",
        "The import from my old notes app stops halfway.",
        "Can I import my Markdown files?",
        "All the formatting was lost when I imported my notes.",
    ],
    "search": [
        "Search doesn't find notes that I know exist.",
        "Search results are missing my newest notes.",
        "Can search look inside my PDF attachments?",
        "Search is very slow on my {device}.",
    ],
    "deleted": [
        "I deleted an important note by accident.",
        "A whole notebook vanished from my {device}.",
        "I emptied the trash. Can I still get my notes back?",
        "I need an older version of a note that I overwrote.",
    ],
    "login": [
        "I can't sign in on my new {device}.",
        "My two-factor codes are always rejected.",
        "The desktop app keeps sending me back to the sign-in page.",
        "Signing in with Google doesn't work on my {device} any more.",
    ],
    "reminders": [
        "My reminders don't notify me on my {device}.",
        "I missed a meeting because no reminder notification appeared.",
        "How do I set a reminder that repeats every week?",
        "My reminders go off an hour late since I travelled.",
    ],
}
TICKET_GREETINGS = ["Hi,", "Hello,", "Hi support,", "Hello {product} team,", "Hey,", "", ""]
TICKET_DETAILS = [
    "I'm on version {version}.",
    "This started after the last update.",
    "It worked fine until yesterday.",
    "I already restarted the app twice.",
    "I have the Pro plan.",
    "It happens every time.",
    "",
    "",
]
TICKET_ASKS = [
    "Can you help?",
    "What should I do?",
    "Any idea what is wrong?",
    "Please help, I need this for work.",
    "Thanks in advance!",
    "Is this a known bug?",
    "",
]
TICKET_SIGNS = ["Thanks, {name}", "{name}", "Best, {name}", "Cheers, {name}", "", ""]
EMOJI = [" \U0001f64f", " \U0001f629", " \U0001f642"]  # folded hands, weary face, slightly smiling face

SYSTEM_STANDARD = [
    "You are the support assistant for {product}, a note-taking app. Reply politely and give numbered steps.",
    "You answer customer tickets for {product}. Greet the customer and list the steps that fix the problem.",
    "You are a friendly {product} support agent.",
]
SYSTEM_BRIEF = [
    "You are the {product} support assistant. Answer in one short paragraph, without a list.",
    "Reply to {product} customers briefly: one step, no list.",
]

STILL_BROKEN = [
    "I tried that, but it still doesn't work.",
    "No luck, the problem is still there.",
    "That didn't help, sorry.",
    "Still the same problem after those steps.",
]
ESCALATION_OPENERS = [
    "Sorry it's still not working.",
    "Thanks for trying that, and sorry it didn't help.",
    "I'm sorry the first steps didn't fix it.",
]
ESCALATION_CLOSINGS = [
    "If that doesn't help either, reply with your app version and device and we'll look into it.",
    "If it still fails, send us a screenshot of the error and we'll dig deeper.",
]
NEXT_QUESTION = [
    "Thanks, that fixed it! One more thing:",
    "That worked, thank you. Another question:",
    "Great, thanks. Also:",
]
THANKS = ["Thanks, that fixed it!", "Perfect, all working now. \U0001f642", "That did it, thank you!"]
YOU_ARE_WELCOME = [
    "Great to hear! Enjoy using {product}.",
    "Glad it's working again. Have a great day!",
    "You're welcome! Write to us any time.",
]

# Tickets and replies in other languages, for five of the topics.
LANGUAGES = {
    "de": {
        "greetings": ["Hallo,", "Guten Tag,", ""],
        "details": ["Ich nutze Version {version}.", "Das passiert seit dem letzten Update.", ""],
        "asks": ["Können Sie mir helfen?", "Was kann ich tun?", "Vielen Dank im Voraus!"],
        "signs": ["Viele Grüße, {name}", "{name}", ""],
        "reply_greetings": ["Hallo {name},", "Guten Tag {name},"],
        "leads": ["Bitte versuchen Sie Folgendes:", "Diese Schritte helfen meistens:"],
        "closings": ["Melden Sie sich gern, wenn das Problem bleibt.", "Viele Grüße vom {product} Support."],
        "topics": {
            "sync": (
                [
                    "Meine Notizen werden zwischen meinem {device} und meinem Handy nicht synchronisiert.",
                    "Die Synchronisierung bricht auf meinem {device} immer mit einem Fehler ab.",
                ],
                "Danke für Ihre Nachricht zur Synchronisierung Ihrer Notizen.",
                [
                    "Öffnen Sie Einstellungen > Sync und tippen Sie auf Jetzt synchronisieren.",
                    "Melden Sie sich ab und wieder an.",
                    "Prüfen Sie, ob die Hintergrund-Synchronisierung eingeschaltet ist.",
                ],
            ),
            "password": (
                [
                    "Ich habe ein neues Passwort angefordert, aber die E-Mail kam nie an.",
                    "Ich komme auf meinem {device} nicht mehr in mein Konto.",
                ],
                "Danke für Ihre Nachricht zu Ihrem Passwort.",
                [
                    "Wählen Sie auf der Anmeldeseite Passwort vergessen.",
                    "Sehen Sie im Spam-Ordner nach.",
                    "Öffnen Sie den neuesten Link, denn ältere Links verfallen.",
                ],
            ),
            "billing": (
                [
                    "Mir wurde der Pro-Tarif diesen Monat zweimal berechnet.",
                    "Ich möchte mein Abo kündigen, bevor es sich verlängert.",
                ],
                "Danke für Ihre Nachricht zu Ihrer Abrechnung.",
                [
                    "Öffnen Sie Einstellungen > Konto > Abrechnung, um Ihre Rechnungen zu sehen.",
                    "Wählen Sie Abo verwalten und dann Tarif kündigen.",
                    "Ich habe die Erstattung veranlasst, Sie müssen nichts weiter tun.",
                ],
            ),
            "dark_mode": (
                [
                    "Der dunkle Modus folgt auf meinem {device} nicht der Systemeinstellung.",
                    "Wie schalte ich das dunkle Design ein?",
                ],
                "Danke für Ihre Nachricht zum dunklen Modus.",
                [
                    "Öffnen Sie Einstellungen > Darstellung und wählen Sie Dunkel.",
                    "Stellen Sie Design auf Wie System, damit es Ihrem Gerät folgt.",
                    "Starten Sie die App nach dem Wechsel des Designs neu.",
                ],
            ),
            "pdf": (
                [
                    "Beim Export einer Notiz als PDF auf meinem {device} bekomme ich leere Seiten.",
                    "Im PDF-Export fehlen alle Bilder.",
                ],
                "Danke für Ihre Nachricht zum PDF-Export.",
                [
                    "Öffnen Sie die Notiz und wählen Sie Datei > Exportieren > PDF.",
                    "Schalten Sie vor dem Export Anhänge einbeziehen ein.",
                    "Aktualisieren Sie auf Version {version}, die einen Layoutfehler im PDF behebt.",
                ],
            ),
        },
    },
    "es": {
        "greetings": ["Hola,", "Buenos días,", ""],
        "details": ["Uso la versión {version}.", "Empezó después de la última actualización.", ""],
        "asks": ["¿Pueden ayudarme?", "¿Qué puedo hacer?", "¡Gracias de antemano!"],
        "signs": ["Saludos, {name}", "{name}", ""],
        "reply_greetings": ["Hola {name},", "Buenos días {name},"],
        "leads": ["Pruebe lo siguiente:", "Estos pasos suelen resolverlo:"],
        "closings": ["Escríbanos de nuevo si el problema continúa.", "Un saludo del equipo de soporte de {product}."],
        "topics": {
            "sync": (
                [
                    "Mis notas no se sincronizan entre mi {device} y mi móvil.",
                    "La sincronización falla siempre en mi {device}.",
                ],
                "Gracias por escribirnos sobre la sincronización de sus notas.",
                [
                    "Abra Ajustes > Sincronización y pulse Sincronizar ahora.",
                    "Cierre la sesión y vuelva a iniciarla.",
                    "Compruebe que la sincronización en segundo plano está activada.",
                ],
            ),
            "password": (
                [
                    "Pedí restablecer mi contraseña, pero el correo nunca llegó.",
                    "No puedo entrar en mi cuenta desde mi {device}.",
                ],
                "Gracias por escribirnos sobre su contraseña.",
                [
                    "En la pantalla de inicio de sesión, elija ¿Olvidó su contraseña?",
                    "Revise la carpeta de correo no deseado.",
                    "Use el enlace más reciente, porque los anteriores caducan.",
                ],
            ),
            "billing": (
                [
                    "Me han cobrado dos veces el plan Pro este mes.",
                    "Quiero cancelar mi suscripción antes de que se renueve.",
                ],
                "Gracias por escribirnos sobre su facturación.",
                [
                    "Abra Ajustes > Cuenta > Facturación para ver sus facturas.",
                    "Elija Gestionar suscripción y luego Cancelar plan.",
                    "Ya he emitido el reembolso, así que no tiene que hacer nada más.",
                ],
            ),
            "dark_mode": (
                ["El modo oscuro no sigue la configuración de mi {device}.", "¿Cómo activo el tema oscuro?"],
                "Gracias por escribirnos sobre el modo oscuro.",
                [
                    "Abra Ajustes > Apariencia y elija Oscuro.",
                    "Elija Igual que el sistema para que siga a su dispositivo.",
                    "Reinicie la aplicación después de cambiar el tema.",
                ],
            ),
            "pdf": (
                [
                    "Al exportar una nota a PDF en mi {device} salen páginas en blanco.",
                    "La exportación a PDF no incluye las imágenes.",
                ],
                "Gracias por escribirnos sobre la exportación a PDF.",
                [
                    "Abra la nota y elija Archivo > Exportar > PDF.",
                    "Active Incluir adjuntos antes de exportar.",
                    "Actualice a la versión {version}, que corrige un error de diseño del PDF.",
                ],
            ),
        },
    },
    "fr": {
        "greetings": ["Bonjour,", "Bonsoir,", ""],
        "details": ["J'utilise la version {version}.", "Cela a commencé après la dernière mise à jour.", ""],
        "asks": ["Pouvez-vous m'aider ?", "Que dois-je faire ?", "Merci d'avance !"],
        "signs": ["Cordialement, {name}", "{name}", ""],
        "reply_greetings": ["Bonjour {name},", "Bonsoir {name},"],
        "leads": ["Essayez ceci :", "Ces étapes règlent généralement le problème :"],
        "closings": ["Écrivez-nous si le problème persiste.", "Bonne journée de la part du support {product}."],
        "topics": {
            "sync": (
                [
                    "Mes notes ne se synchronisent pas entre mon {device} et mon téléphone.",
                    "La synchronisation échoue toujours sur mon {device}.",
                ],
                "Merci de nous avoir écrit au sujet de la synchronisation de vos notes.",
                [
                    "Ouvrez Réglages > Synchronisation et touchez Synchroniser maintenant.",
                    "Déconnectez-vous puis reconnectez-vous.",
                    "Vérifiez que la synchronisation en arrière-plan est activée.",
                ],
            ),
            "password": (
                [
                    "J'ai demandé à réinitialiser mon mot de passe, mais l'e-mail n'est jamais arrivé.",
                    "Je n'arrive plus à me connecter à mon compte sur mon {device}.",
                ],
                "Merci de nous avoir écrit au sujet de votre mot de passe.",
                [
                    "Sur l'écran de connexion, choisissez Mot de passe oublié.",
                    "Vérifiez votre dossier de courrier indésirable.",
                    "Ouvrez le lien le plus récent, car les anciens expirent.",
                ],
            ),
            "billing": (
                [
                    "J'ai été facturé deux fois pour le forfait Pro ce mois-ci.",
                    "Je voudrais résilier mon abonnement avant son renouvellement.",
                ],
                "Merci de nous avoir écrit au sujet de votre facturation.",
                [
                    "Ouvrez Réglages > Compte > Facturation pour voir vos factures.",
                    "Choisissez Gérer l'abonnement, puis Résilier le forfait.",
                    "J'ai lancé le remboursement, vous n'avez rien d'autre à faire.",
                ],
            ),
            "dark_mode": (
                ["Le mode sombre ne suit pas le réglage de mon {device}.", "Comment activer le thème sombre ?"],
                "Merci de nous avoir écrit au sujet du mode sombre.",
                [
                    "Ouvrez Réglages > Apparence et choisissez Sombre.",
                    "Réglez Thème sur Comme le système pour suivre votre appareil.",
                    "Redémarrez l'application après avoir changé de thème.",
                ],
            ),
            "pdf": (
                [
                    "Quand j'exporte une note en PDF sur mon {device}, j'obtiens des pages blanches.",
                    "L'export PDF n'inclut pas les images.",
                ],
                "Merci de nous avoir écrit au sujet de l'export PDF.",
                [
                    "Ouvrez la note et choisissez Fichier > Exporter > PDF.",
                    "Activez Inclure les pièces jointes avant d'exporter.",
                    "Mettez à jour vers la version {version}, qui corrige un défaut de mise en page du PDF.",
                ],
            ),
        },
    },
}
DEVICES_ELSEWHERE = ["MacBook", "iPhone", "iPad", "Chromebook", "Pixel", "Galaxy Tab"]  # names every language uses

# Shares of the conversations (each decided with the generator's random numbers, in this order).
SHARE_OTHER_LANGUAGE = 0.06
SHARE_SYSTEM_STANDARD, SHARE_SYSTEM_BRIEF = 0.15, 0.10
SHARE_FOLLOW_UP, SHARE_SECOND_FOLLOW_UP = 0.22, 0.25  # the second: of those with a first follow-up
SHARE_EMAIL, SHARE_PHONE = 0.03, 0.01


def lines(*parts):
    """The non-empty parts joined with newlines."""
    return "\n".join(part for part in parts if part)


def sentence(*parts):
    """The non-empty parts joined with spaces."""
    return " ".join(part for part in parts if part)


def email_of(name):
    """A fictional address at example.com for a customer name."""
    local = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii").lower()
    return f"{local or 'customer'}@example.com"


def make_ticket(rng, topic, problem, name, signed, version):
    """The customer's first message about problem number `problem` of `topic`."""
    device = rng.choice(DEVICES)
    text = sentence(fill(TICKETS[topic][problem], device=device), fill(rng.choice(TICKET_DETAILS), version=version))
    if rng.random() < SHARE_EMAIL:
        text = sentence(text, f"My account email is {email_of(name)}.")
    if rng.random() < SHARE_PHONE:
        text = sentence(text, f"You can call me on +44 20 7946 0{rng.randint(0, 999):03d}.")
    ask = rng.choice(TICKET_ASKS)
    if ask and rng.random() < 0.08:
        ask += rng.choice(EMOJI)
    sign = fill(rng.choice(TICKET_SIGNS), name=name) if signed else ""
    return lines(fill(rng.choice(TICKET_GREETINGS)), sentence(text, ask), sign)


def make_reply(rng, topic, problem, name, brief, version, greet=True):
    """(the reply to problem number `problem` of `topic`: its issue and the topic's steps, numbered
    unless `brief`; the steps it gave)."""
    issues, contexts, steps = TOPICS[topic]
    opener = fill(rng.choice(OPENERS), issue=fill(issues[problem]))
    greeting = fill(rng.choice(GREETINGS), name=name) if name else rng.choice(["Hello,", "Hi there,"])
    closing = fill(rng.choice(CLOSINGS))
    if brief:
        step = rng.choice(steps)
        return sentence(greeting if greet else "", opener, fill(step, version=version), closing), [step]
    context = fill(rng.choice(contexts), version=version) if rng.random() < 0.5 else ""
    chosen = rng.sample(steps, rng.randint(1, min(3, len(steps))))
    numbered = [f"{i}. {fill(step, version=version)}" for i, step in enumerate(chosen, 1)]
    body = [sentence(opener, context), rng.choice(STEP_LEADS)] + numbered + [closing]
    if rng.random() < 0.2:
        body.append(f"{rng.choice(AGENTS)}, {PRODUCT} Support")
    return lines(greeting if greet else "", *body), chosen


def make_follow_up(rng, topic, given, name, brief, version):
    """(user turn, assistant turn, topic after it, steps given for it) after a reply on `topic` that
    gave the steps `given`: the problem persists (a step not given yet), another question, or thanks."""
    kind = rng.random()
    untried = [step for step in TOPICS[topic][2] if step not in given]
    if kind < 0.4 and untried:
        step = rng.choice(untried)
        answer = sentence(
            rng.choice(ESCALATION_OPENERS),
            f"Please also try this: {fill(step, version=version)}",
            rng.choice(ESCALATION_CLOSINGS),
        )
        return rng.choice(STILL_BROKEN), answer, topic, given + [step]
    if kind < 0.75:
        other = rng.choice([t for t in TOPICS if t != topic])
        problem = rng.randrange(len(TICKETS[other]))
        question = sentence(rng.choice(NEXT_QUESTION), fill(TICKETS[other][problem], device=rng.choice(DEVICES)))
        answer, steps = make_reply(rng, other, problem, name, brief, version, greet=False)
        return question, answer, other, steps
    return rng.choice(THANKS), fill(rng.choice(YOU_ARE_WELCOME)), topic, given


def english_conversation(rng, versions):
    """A conversation in English: maybe a system turn, a ticket and its reply, maybe follow-ups."""
    topic, name, version = rng.choice(list(TOPICS)), rng.choice(CUSTOMERS), rng.choice(versions[-12:])
    problem = rng.randrange(len(TICKETS[topic]))
    signed = rng.random() < 0.6
    messages, style = [], rng.random()
    brief = SHARE_SYSTEM_STANDARD <= style < SHARE_SYSTEM_STANDARD + SHARE_SYSTEM_BRIEF
    if style < SHARE_SYSTEM_STANDARD + SHARE_SYSTEM_BRIEF:
        messages.append(("system", fill(rng.choice(SYSTEM_BRIEF if brief else SYSTEM_STANDARD))))
    messages.append(("user", make_ticket(rng, topic, problem, name, signed, version)))
    reply, given = make_reply(rng, topic, problem, name if signed else "", brief, version)
    messages.append(("assistant", reply))
    if rng.random() < SHARE_FOLLOW_UP:
        for _ in range(2 if rng.random() < SHARE_SECOND_FOLLOW_UP else 1):
            question, answer, topic, given = make_follow_up(rng, topic, given, name if signed else "", brief, version)
            messages += [("user", question), ("assistant", answer)]
    return messages


def other_language_conversation(rng, versions):
    """A ticket and its reply in German, Spanish or French."""
    language = LANGUAGES[rng.choice(sorted(LANGUAGES))]
    topic = rng.choice(sorted(language["topics"]))
    tickets, opener, steps = language["topics"][topic]
    name, version, device = rng.choice(CUSTOMERS), rng.choice(versions[-12:]), rng.choice(DEVICES_ELSEWHERE)
    problem = sentence(
        fill(rng.choice(tickets), device=device),
        fill(rng.choice(language["details"]), version=version),
        rng.choice(language["asks"]),
    )
    ticket = lines(rng.choice(language["greetings"]), problem, fill(rng.choice(language["signs"]), name=name))
    chosen = rng.sample(steps, rng.randint(1, len(steps)))
    reply = lines(
        fill(rng.choice(language["reply_greetings"]), name=name),
        opener,
        rng.choice(language["leads"]),
        *[f"{i}. {fill(step, version=version)}" for i, step in enumerate(chosen, 1)],
        fill(rng.choice(language["closings"])),
    )
    return [("user", ticket), ("assistant", reply)]


def make_conversation(rng, versions):
    """One conversation as [(role, content), ...]."""
    if rng.random() < SHARE_OTHER_LANGUAGE:
        return other_language_conversation(rng, versions)
    return english_conversation(rng, versions)


def to_record(messages):
    """The `messages` format record of a conversation, as one JSON line."""
    return (
        json.dumps({"messages": [{"role": role, "content": content} for role, content in messages]}, ensure_ascii=False)
        + "\n"
    )


def main(argv=None):
    """Parse arguments and write the conversations file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=Path(__file__).resolve().parent,
        help="folder to write into (default: the folder of this script)",
    )
    parser.add_argument("--seed", type=int, default=20261203, help="random seed")
    parser.add_argument("--conversations", type=int, default=3000, help="number of conversations to write")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    versions = make_versions(rng, 300)
    records, seen = [], set()
    while len(records) < args.conversations:
        record = to_record(make_conversation(rng, versions))
        if record not in seen:  # every conversation is different
            seen.add(record)
            records.append(record)
    write_text(args.out_dir / OUTPUT, "".join(records))
    print(f"wrote {len(records)} conversations to {args.out_dir / OUTPUT}")


if __name__ == "__main__":
    main()
