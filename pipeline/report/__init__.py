"""report.py's page of the whole run, one module per part (report.py calls them in order).

    html       escaping and visible control characters; tables, badges, texts
    state      what ran and whether it is fresh: manifests, missing and stale steps
    page       a section and its status, the missing/stale boxes, the document (page.css)
    charts     the figures, matplotlib to base64 PNG
    diff       near-duplicate texts side by side, their differences marked
    funnel     section 1: documents and bytes after each stage
    cleaning   section 2: each rule, the signals' histograms, the languages, the sweep
    dedup      section 3: exact groups, MinHash clusters, the S-curve, the sweep
    tokenizer  section 4: compression, the training sample, tokens per document
    pack       section 5: the packed files and verify.py's checklist
    header     the summary over the sections, the stages' table, the files read
"""
