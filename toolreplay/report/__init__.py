"""Rich renderings of audit reports: self-contained HTML pages for one session or a whole fleet."""
