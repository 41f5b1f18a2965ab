"""The instructor's side of the course: nbgrader driven for a class, the demo class, the sandbox, the grades.

Run from the repository root, each as a module (`make` runs them so):

    python -m autograder.classroom demo|autograde|gradebook [ASSIGNMENT ...]   release, grade, print the gradebook
                                                   (make demo, make autograde, make gradebook, make gpu-demo)
    python -m autograder.term exchange|stamp|feedback|hand-back [ASSIGNMENT ...]   a term through nbgrader's
                                                   exchange (make exchange, make feedback, make hand-back)
    python -m autograder.export [ASSIGNMENT ...]   the grades export (make export)
    python -m autograder.grade_direct [ASSIGNMENT ...]   the trusted grader without nbgrader (make gpu-check)
    python -m autograder.mutate [ASSIGNMENT ...]   mutation testing of the grader (make mutate)
    python -m autograder.pgscratch DIR             a throwaway PostgreSQL server
    python -m autograder.release [ASSIGNMENT ...]  the student notebooks from solutions/ (make release)

The modules:

    classroom      nbgrader for a class: the demo class, autograde with progress and timeouts, in parallel
    gradebook      the gradebook read back: scores per cell, the failing cells' messages, the printed table
    term           the command line of a term (exchange, stamp, feedback, hand-back)
    exchange       the exchange's folder and the students' config; timestamps of hand-copied submissions
    feedback       feedback generated, pruned to what the course generated, handed back
    nbgrader_cli   nbgrader's command line run on the real class's folders
    preprocessors  nbgrader plug-ins: OverwriteCells (quiet restoration of hidden tests), StudentFeedback
    intake         regular files only: collect (SafeCollect), autograde (RegularFilesOnly), feedback
    export         the grades export (bonus apart, not-measured apart)
    grade_direct   the trusted grader run directly, without nbgrader (a GPU box, the tests)
    demo           the demo class's and the adversarial corpus's files: the one reader, what each submits
    parallel       grading N submissions at once, on this host or on Dask
    pgscratch      a throwaway PostgreSQL server (tests, the demo's parallel gradebook)
    release        nbgrader generate_assignment for each chapter, quiet about the overwrite it expects
    mutate         mutation testing of the grader
    sandbox        the bubblewrap sandbox as nbgrader configuration (with sandbox_exec.sh)

demo_class/ and adversarial/ are data (students' files), not modules.
"""
