# nbgrader configuration of the course. Paths are relative to the repository root (run nbgrader from there).
# solutions/<assignment>/ is the source; `nbgrader generate_assignment` writes the student notebooks to
# notebooks/<assignment>/. A class's submissions go to autograder/submitted/<student>/<assignment>/.
c = get_config()  # noqa: F821

c.CourseDirectory.course_id = "qmatmul"
c.CourseDirectory.root = "."
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = "autograder/submitted"
c.CourseDirectory.autograded_directory = "autograder/autograded"
c.CourseDirectory.feedback_directory = "autograder/feedback"
c.CourseDirectory.db_url = "sqlite:///autograder/gradebook.db"
c.CourseDirectory.source_with_tests_directory = "build/source_with_tests"
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "build"]

# Triton compiles each kernel on first use (seconds on a GPU), and the interpreter runs kernels as numpy:
# a cell may take minutes, never hours. A hung kernel is interrupted and that cell gets no points.
c.Execute.timeout = 300
c.Execute.interrupt_on_timeout = True
c.Execute.allow_errors = True

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
