"""Offline build tools of the code-repair family: they make ``data/manifest.json.gz``.

Nothing at run time imports this package (the env, the verifier and the attacks read only the
manifest it writes): :mod:`.synthesize` plants bugs with the operators of :mod:`.mutate`, runs
each project's tests (:mod:`.runs`, with the :mod:`.failure_probe` pytest plugin) and keeps the
mutants those tests catch, each with an issue text from :mod:`.issue_text`.

    python -m envhub.tasks.code_repair.offline.synthesize --seed 0
"""
