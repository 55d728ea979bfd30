"""verify.py's acceptance checklist (section 6), its ten checks grouped by what they check
(verify.py lists them in order, CHECKS).

    context    what the checks share: an item's result, the inputs each read once
    scan       the one parallel pass over the packed input (band hashes, val texts, sample)
    packed     1: train.bin and val.bin against their manifest and the estimate
    decoded    2-4: decoded windows, the tokenizer's round trip, one EOS per document
    upstream   5-7: clean's stats, the dedup stages' counts, the tokenizer's compression
    leakage    8: no val document in train, exactly or nearly
    smoke      9: the pipeline ran end to end on the smoke data set
    lost       10: nothing lost, from the raw download to the packed output
    report     the checklist printed, as Markdown and as JSON
"""
