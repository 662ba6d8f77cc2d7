//! Message-logging protocols and dedicated logger cores. Filled in by the logging issue.
