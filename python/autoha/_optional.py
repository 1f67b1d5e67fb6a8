"""The optional dependencies of the pictures and tables (pyproject.toml's `plot` extra).

autoha itself needs nothing but the standard library; matplotlib and pandas are imported only when a
picture or a DataFrame is asked for, and their absence is one error naming the pip command.
"""
import importlib


class MissingDependency(ImportError):
    """Raised when matplotlib or pandas is not installed; its text names the pip command."""


def need(module, what):
    """Returns the imported `module`, or raises MissingDependency saying `what` needs it.

    Note that the extra is named first: `pip install 'autoha[plot]'` brings both packages at the
    versions the package was tested with; the bare name is for an environment that pins its own.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        raise MissingDependency(
            f"autoha: {what} needs {top}, which is not installed ({e}): "
            f"pip install 'autoha[plot]' (or pip install {top})") from None
