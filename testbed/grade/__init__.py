"""Assignments, checks and grading of students' result bundles (docs/assignments.md).

* `rubric`: an assignment folder (``experiments/assignments/<name>/``: specs, questions.md,
  rubric.toml) loaded and validated;
* `intake`: submissions (folders, zip and tar.gz archives) copied or extracted safely;
* `verify`: a submission's bundles re-analysed from their captures into a workspace, the
  stored metrics compared with the recomputed ones, the specs with the assignment's;
* `checks`: the rubric's SQL checks run over a workspace;
* `gradebook`: a class graded into gradebook.csv; `pages`: the feedback and class pages.
"""
