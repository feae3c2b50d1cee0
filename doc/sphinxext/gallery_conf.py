"""The gallery's sphinx-gallery configuration (used by ``doc/conf.py`` and by the test that
checks that a failing example stops the build)."""
import os

#: examples in this order; any other example after them, by file name
ORDER = [
    "plot_flights_components.py",
    "plot_solver_convergence.py",
    "plot_rank_selection.py",
    "plot_planted_recovery.py",
    "plot_gcp_losses.py",
    "plot_cpu_vs_opencl.py",
    "plot_streaming.py",
]


class ExampleOrder:
    """Sort key: position in :data:`ORDER`, then the file name."""

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename):
        name = os.path.basename(filename)
        return (ORDER.index(name) if name in ORDER else len(ORDER), name)

    def __repr__(self):
        return f"{type(self).__module__}.{type(self).__name__}"


def gallery_conf(examples_dir, backreferences=True):
    """``sphinx_gallery_conf`` for the examples in ``examples_dir``.

    Every example runs at every build; one that raises (a missing data file, an exception)
    stops the build with its traceback.
    """
    conf = {
        "examples_dirs": str(examples_dir),
        "gallery_dirs": "auto_examples",
        "filename_pattern": r"/plot_",
        "within_subsection_order": "gallery_conf.ExampleOrder",
        "abort_on_example_error": True,
        "only_warn_on_example_error": False,
        "expected_failing_examples": [],
        "plot_gallery": "True",
        "download_all_examples": False,
        "remove_config_comments": True,
        "image_scrapers": ("matplotlib",),
        "matplotlib_animations": False,
        "show_memory": False,
        "min_reported_time": 1,
        "write_computation_times": False,
    }
    if backreferences:
        conf.update({"doc_module": ("sktensor_fast",),
                     "backreferences_dir": "api/generated/backreferences",
                     "reference_url": {"sktensor_fast": None}})
    return conf
