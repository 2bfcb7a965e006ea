"""Generate the small bundled sample corpus for the byte-level text model.

The pipeline's tests and quick-start examples need a corpus that is small,
license-clean and has clear recurring structure, so a tiny model can learn
something visible in a few minutes. This script writes, from templates and a
fixed seed (the output is byte-for-byte reproducible):

* ``corpus/support_replies.txt``: support replies for the fictional
  note-taking app "Lumen Notes", one document per paragraph, documents
  separated by exactly one blank line.
* ``corpus/release_notes.jsonl``: short release notes, one JSON object per
  line with the fields ``text`` and ``version``.
* ``prompts.txt``: sample prompts that open documents like the corpus.

Usage: ``python data/make_sample_corpus.py [--out-dir DIR] [--seed N]
[--documents N] [--release-notes N]``. Only the Python standard library is
used; the same seed and counts always give the same bytes.
"""

import argparse
import json
import random
from pathlib import Path

PRODUCT = "Lumen Notes"

CUSTOMERS = [
    "Maria",
    "James",
    "Priya",
    "Chen",
    "Olivia",
    "Ahmed",
    "Sofia",
    "Liam",
    "Hannah",
    "Kenji",
    "Fatima",
    "Noah",
    "Grace",
    "Mateo",
    "Amara",
    "Ethan",
    "Ingrid",
    "Ravi",
    "Chloe",
    "Tomás",
    "José",
    "Zoë",
    "Łukasz",
    "Ayşe",
    "Søren",
    "Björn",
    "Anaïs",
    "Renée",
    "Dmitri",
    "Yusuf",
    "Elena",
    "Marcus",
]
AGENTS = ["Dana", "Felix", "Nora", "Sam", "Aisha", "Theo", "Mia", "Jonas", "Leila", "Oscar", "Céline", "Rowan"]

GREETINGS = ["Hi {name},", "Hello {name},", "Dear {name},", "Hey {name},", "Good morning {name},", "Hi there {name},"]
OPENERS = [
    "Thanks for reaching out about {issue}.",
    "Thank you for contacting us about {issue}.",
    "I'm sorry you've had trouble with {issue}.",
    "Thanks for letting us know about {issue}.",
    "I know this has been frustrating, so let's sort out {issue}.",
    "I can help you with {issue}.",
]
STEP_LEADS = [
    "Here is what should fix it:",
    "Please try the following:",
    "Could you try these steps?",
    "Here's what I'd suggest:",
    "These steps usually sort it out:",
]
CLOSINGS = [
    "Let me know if that works for you.",
    "If the problem continues, just reply to this email and we'll dig deeper.",
    "Please reply here if you have any other questions.",
    "I hope this helps, and thanks for using {product}.",
    "Feel free to write back if anything is still unclear.",
    "We're always happy to help.",
]
SIGNOFFS = [
    "Best regards,\n{agent}",
    "Kind regards,\n{agent}",
    "Cheers,\n{agent}",
    "Thanks,\n{agent}",
    "All the best,\n{agent}",
    "Warm wishes,\n{agent}",
]
TEAM_SUFFIX = ["", "", " from the {product} team", " | {product} Support"]

# Each topic is (issue phrasings, context sentences, concrete steps); a reply
# uses one issue, maybe one context sentence and 1-3 of the steps.
TOPICS = {
    "sync": (
        [
            "your notes not syncing",
            "sync failing on your laptop",
            "the sync error you are seeing",
            "changes not showing up on your phone",
        ],
        [
            "This usually happens when the local cache gets out of date.",
            "Our logs show your last successful sync was a few days ago.",
            "Sync can pause if the app was signed out in the background.",
        ],
        [
            "Open Settings > Sync and tap Sync Now.",
            "Sign out of {product} and sign back in.",
            "Check that Background Sync is switched on.",
            "Go to Settings > Sync > Advanced and choose Rebuild Local Cache.",
            "Make sure every device runs version {version} or later.",
        ],
    ),
    "pdf": (
        [
            "exporting notes to PDF",
            "blank pages in your PDF export",
            "PDF exports missing images",
            "the PDF export button being greyed out",
        ],
        [
            "Large embedded images can slow down the PDF renderer.",
            "Export works on one note or a whole notebook at a time.",
            "The export uses the page size set in your print settings.",
        ],
        [
            "Open the note and choose File > Export > PDF.",
            "Switch Page Size to A4 or Letter under Export Options.",
            "Turn on Include Attachments before exporting.",
            "Update to version {version}, which fixed a PDF layout bug.",
        ],
    ),
    "password": (
        [
            "resetting your password",
            "the password reset email not arriving",
            "being locked out of your account",
            "changing your password",
        ],
        [
            "Reset links expire after 30 minutes for security reasons.",
            "Reset emails sometimes land in a spam or promotions folder.",
            "For your security we can't change passwords on your behalf.",
        ],
        [
            "Go to the sign-in screen and select Forgot Password.",
            "Check your spam folder for a message from {product}.",
            "Open the newest reset link, since older ones stop working.",
            "Open Settings > Account > Security and choose Change Password.",
        ],
    ),
    "billing": (
        [
            "getting a refund for your subscription",
            "being charged twice this month",
            "your billing question",
            "cancelling your Pro plan",
        ],
        [
            "I can see the duplicate charge on your account.",
            "Refunds normally appear within 5 to 10 business days.",
            "Your Pro features stay active until the end of the billing period.",
        ],
        [
            "Open Settings > Account > Billing to see your invoices.",
            "Choose Manage Subscription and select Cancel Plan.",
            "Reply with the last four digits of the card that was charged.",
            "I have issued the refund, so no further action is needed.",
        ],
    ),
    "shortcuts": (
        [
            "keyboard shortcuts",
            "shortcuts not working on your keyboard",
            "customising keyboard shortcuts",
            "the shortcut for a new note",
        ],
        [
            "Some shortcuts clash with system shortcuts on certain layouts.",
            "Every shortcut can be changed to suit your keyboard.",
            "Ctrl+N (Cmd+N on Mac) creates a new note by default.",
        ],
        [
            "Open Settings > Keyboard to see the full list.",
            "Click a shortcut and press the new key combination.",
            "Choose Reset to Defaults if a shortcut stops responding.",
            "Press Ctrl+/ (Cmd+/ on Mac) to show the shortcut cheat sheet.",
        ],
    ),
    "offline": (
        [
            "using {product} offline",
            "offline mode not saving your edits",
            "notes missing while you were offline",
            "offline access on a flight",
        ],
        [
            "Offline notes are stored on the device until you reconnect.",
            "Only notebooks marked Available Offline are kept locally.",
            "Edits made offline sync automatically once you are back online.",
        ],
        [
            "Right-click the notebook and choose Make Available Offline.",
            "Open Settings > Storage and turn on Offline Mode.",
            "Reconnect to the internet and leave the app open for a minute.",
            "Avoid signing out while offline, as unsynced edits are kept on the device.",
        ],
    ),
    "attachments": (
        [
            "attachments being too large",
            "the attachment size limit",
            "a video that would not upload",
            "files failing to attach",
        ],
        [
            "The free plan allows attachments up to 25 MB each.",
            "Pro accounts can attach files up to 200 MB.",
            "Very large files are best linked rather than embedded.",
        ],
        [
            "Compress the file or split it into smaller parts.",
            "Open Settings > Account to check your storage usage.",
            "Paste a share link from your cloud drive instead of the file.",
            "Upgrade to Pro under Settings > Account > Plans.",
        ],
    ),
    "dark_mode": (
        [
            "dark mode",
            "dark mode not following your system setting",
            "text being hard to read in dark mode",
            "switching themes",
        ],
        [
            "The theme can follow your system or be set by hand.",
            "Some older notes keep the text colour they were written with.",
            "We added a high-contrast dark theme in version {version}.",
        ],
        [
            "Open Settings > Appearance and choose Dark.",
            "Set Theme to Match System to follow your device.",
            "Select the note text and choose Format > Clear Colour.",
            "Restart the app after changing the theme.",
        ],
    ),
    "sharing": (
        [
            "sharing a notebook",
            "a shared notebook your team can't open",
            "sharing permissions",
            "inviting people to edit your notes",
        ],
        [
            "Invitations are sent to the email address you type in.",
            "Viewers can read a notebook but not change it.",
            "Shared notebooks count toward the owner's storage only.",
        ],
        [
            "Right-click the notebook and choose Share.",
            "Enter their email and pick Can Edit or Can View.",
            "Ask them to accept the invitation from their inbox.",
            "Open Share > Manage Access to remove someone.",
        ],
    ),
    "import": (
        [
            "importing your old notes",
            "the import from another app stopping halfway",
            "importing Markdown files",
            "formatting lost during import",
        ],
        [
            "The importer handles Markdown, plain text and HTML files.",
            "Very large archives are imported in batches of 500 notes.",
            "Tables and headings are kept, but custom fonts are not.",
        ],
        [
            "Choose File > Import and select the folder or archive.",
            "Unzip the archive first if it has nested folders.",
            "Keep the app open until the progress bar finishes.",
            "Run the import again; notes already imported are skipped.",
        ],
    ),
    "search": (
        ["search not finding your notes", "missing search results", "searching inside attachments", "slow search"],
        [
            "The search index is rebuilt after large imports.",
            "Text inside PDFs and images is indexed on Pro plans.",
            "Search looks at titles, tags and note content.",
        ],
        [
            "Open Settings > Advanced and choose Rebuild Search Index.",
            "Wrap a phrase in quotes to search for it exactly.",
            "Use tag:work to search only notes with that tag.",
            "Give the index a few minutes after the rebuild starts.",
        ],
    ),
    "deleted": (
        [
            "a note you deleted by accident",
            "recovering lost notes",
            "the trash being emptied",
            "an older version of a note",
        ],
        [
            "Deleted notes stay in the Trash for 30 days.",
            "Every note keeps a version history for 60 days.",
            "Our backups can restore notes removed within the last week.",
        ],
        [
            "Open the Trash from the sidebar and choose Restore.",
            "Open the note and choose History to pick an older version.",
            "Reply with the note title and we'll restore it from backup.",
        ],
    ),
    "login": (
        [
            "signing in on a new device",
            "two-factor codes not working",
            "the sign-in loop on the desktop app",
            "signing in with Google",
        ],
        [
            "Two-factor codes depend on your phone's clock being correct.",
            "The desktop app opens your browser to finish signing in.",
            "Each account can be signed in on up to five devices.",
        ],
        [
            "Set your phone's time to update automatically.",
            "Use one of your backup codes from Settings > Security.",
            "Clear the browser cookies for lumennotes.example and try again.",
            "Remove an old device under Settings > Account > Devices.",
        ],
    ),
    "reminders": (
        [
            "reminders not notifying you",
            "missed reminder notifications",
            "setting a recurring reminder",
            "reminders in the wrong time zone",
        ],
        [
            "Reminders use the time zone set on your account.",
            "Your phone may silence notifications in battery saver mode.",
            "Recurring reminders can repeat daily, weekly or monthly.",
        ],
        [
            "Allow notifications for {product} in your system settings.",
            "Open Settings > Account and check your time zone.",
            "Open the reminder, choose Repeat and pick a schedule.",
            "Turn off battery optimisation for {product}.",
        ],
    ),
}

CHANGES = [
    "Fixed a crash when exporting long notes to PDF.",
    "Added a high-contrast dark theme.",
    "Sync is now up to twice as fast on slow connections.",
    "Tags are suggested while you type.",
    "Keyboard shortcuts can now be customised per notebook.",
    "Improved Markdown import for nested lists and tables.",
    "Reminders now respect daylight saving time changes.",
    "Fixed attachments failing to upload on some networks.",
    "Search now finds words inside scanned PDFs on Pro plans.",
    "Shared notebooks show who is editing in real time.",
    "Offline edits are kept safely when the app closes unexpectedly.",
    "The password reset page loads faster.",
    "Fixed a rare sync conflict that duplicated notes.",
    "Added Ukrainian, Turkish and Polish translations.",
    "Reduced memory use when opening large notebooks.",
    "The Trash now shows how many days remain before deletion.",
    "Improved accessibility labels for screen readers.",
    "Fixed the PDF export button staying greyed out.",
    "Two-factor sign-in now accepts backup codes on mobile.",
    "Images can now be resized by dragging their corners.",
    "Fixed a layout glitch in the sidebar on small screens.",
    "Billing invoices can now be downloaded as PDF.",
    "Notebooks can be sorted by last edited date.",
    "Fixed reminders firing twice on tablets.",
]
NOTE_OPENERS = [
    "{product} {version} is now available.",
    "{product} {version} is out.",
    "What's new in {product} {version}:",
    "{product} {version} brings a few improvements.",
    "Release {version} of {product} is rolling out now.",
    "Changes in {product} {version}:",
]
NOTE_CLOSERS = [
    "",
    "",
    "Update from the app store or the website.",
    "Thanks to everyone who sent feedback.",
    "The update installs automatically on desktop.",
]


def make_versions(rng, count):
    """Return ``count`` ascending version strings such as ``"4.2.1"``."""
    versions, major, minor = [], 3, 0
    while len(versions) < count:
        versions += [f"{major}.{minor}.{patch}" for patch in range(rng.randint(4, 10))]
        major, minor = (major + 1, 0) if minor == 9 else (major, minor + 1)
    return versions[:count]


def fill(text, **values):
    """Fill the ``{placeholders}`` in ``text``; ``product`` is always set."""
    return text.format(product=PRODUCT, **values)


def make_steps(rng, steps, version):
    """Return 1 to 3 numbered step lines drawn from a topic's step pool."""
    chosen = rng.sample(steps, rng.randint(1, min(3, len(steps))))
    return [f"{i}. {fill(step, version=version)}" for i, step in enumerate(chosen, 1)]


def make_reply(rng, versions):
    """Return one support reply document (single newlines only, no blank line)."""
    issues, contexts, steps = TOPICS[rng.choice(list(TOPICS))]
    version = rng.choice(versions[-12:])
    body = [fill(rng.choice(OPENERS), issue=fill(rng.choice(issues)))]
    if rng.random() < 0.7:
        body.append(fill(rng.choice(contexts), version=version))
    agent = rng.choice(AGENTS) + fill(rng.choice(TEAM_SUFFIX))
    lines = [fill(rng.choice(GREETINGS), name=rng.choice(CUSTOMERS)), " ".join(body), rng.choice(STEP_LEADS)]
    lines += make_steps(rng, steps, version)
    lines.append(fill(rng.choice(CLOSINGS)))
    lines.append(fill(rng.choice(SIGNOFFS), agent=agent))
    return "\n".join(lines)


def make_release_note(rng, version):
    """Return one release-note record ``{"text": ..., "version": "4.2.1"}``."""
    parts = [fill(rng.choice(NOTE_OPENERS), version=version)]
    parts += rng.sample(CHANGES, rng.randint(2, 4))
    parts.append(rng.choice(NOTE_CLOSERS))
    return {"text": " ".join(p for p in parts if p), "version": version}


def make_prompts(rng, count=6):
    """Return ``count`` prompts (greeting line + opener start) like the corpus."""
    starts = [o.split("{issue}")[0].rstrip() for o in OPENERS]
    names = rng.sample(CUSTOMERS[-12:], count)
    return [fill(rng.choice(GREETINGS), name=name) + "\n" + starts[i % len(starts)] for i, name in enumerate(names)]


def write_text(path, text):
    """Write ``text`` as UTF-8 with Unix newlines, creating parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.write(text)


def main(argv=None):
    """Parse arguments and write the corpus files and the prompts file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=Path(__file__).resolve().parent,
        help="folder to write into (default: the folder of this script)",
    )
    parser.add_argument("--seed", type=int, default=20240601, help="random seed")
    parser.add_argument("--documents", type=int, default=1800, help="number of support replies to write")
    parser.add_argument("--release-notes", type=int, default=300, help="number of release notes to write")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    versions = make_versions(rng, args.release_notes)

    replies = [make_reply(rng, versions) for _ in range(args.documents)]
    write_text(args.out_dir / "corpus" / "support_replies.txt", "\n\n".join(replies) + "\n")

    notes = [make_release_note(rng, v) for v in versions]
    write_text(
        args.out_dir / "corpus" / "release_notes.jsonl",
        "".join(json.dumps(n, ensure_ascii=False) + "\n" for n in notes),
    )

    header = "# One prompt per line; a newline inside a prompt is written as the two characters \\n\n"
    prompts = [p.replace("\n", "\\n") for p in make_prompts(rng)]
    write_text(args.out_dir / "prompts.txt", header + "\n".join(prompts) + "\n")
    print(f"wrote {len(replies)} replies, {len(notes)} release notes and {len(prompts)} prompts under {args.out_dir}")


if __name__ == "__main__":
    main()
