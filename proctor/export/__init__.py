"""``proctor export``: a released campaign as a dataset anyone can re-analyse.

Layout of the output folder (written under a temporary name and renamed
into place when complete, so a half-written export never looks finished)::

    dataset.json           what this is: campaign, protocol, revealed seed and
                           commitment, label stream, code version, counts, and
                           the sha256 and size of every file below
    episodes.csv           the interchange file (docs/methods.md §8), one row an episode
    episodes/<uid>/
        episode.json       the episode row, its event log (operator log included),
                           detector candidates, placement events of every label
                           stream and the append-only review history (a person
                           who reviewed is "a reviewer", as the public explorer
                           says; an automatic reviewer keeps its label)
        telemetry.parquet  100 Hz telemetry (columns: proctor/core/recording/keys.py)
        frames-<camera>.parquet   per-frame timestamps of each video
        video-<camera>.mp4        H.264, one per camera (skipped with --no-media)
        manifest.json      the station's episode manifest
        ground-truth.json  simulated cell only

Only released campaigns are exported: before release, who ran what is sealed.
After release the public board's rule applies (``proctor.scheduler.naming``): a
policy is named only if its submitter opted in — the human reference always —
and the others appear under their blinded arm label — in the fields that
hold a policy's name (the interchange file's ``policy`` column, the
reference, the list of withheld identities). Free text (operator notes,
events, review notes) is exported as the public run explorer shows it,
never rewritten (a label where a word was would show which name it hides);
the campaign's description is left out if it mentions a withheld name.
Every artifact is verified against its sha256 on the way out.

``--format lerobot`` writes the same campaign as a LeRobot v3 dataset instead
(``proctor.export.lerobot``: layout, features, how telemetry is resampled onto
the video's frames); ``proctor.export.audience`` says who may export what (the
public a released campaign, named as above; a submitter their own policies'
episodes, before release too). The formats are found by name in
``proctor.export.formats``.
"""
