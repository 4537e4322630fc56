"""Study types as plug-ins: what people do in a study, and everything that follows from it.

``registry.STUDY_TYPES`` maps a study's ``study_type`` to its plug-in (``base.StudyTypePlugin``:
the interface, what a type provides); each type is one package here (``nextword``: pick the
most plausible next word, CGD and EB-C; ``ratings``: rate continuations, EB-M). Adding a
type is one package and one line of the registry (and its ``StudyType`` value). See
docs/architecture.md.
"""
