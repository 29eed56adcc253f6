"""CPU replay of recorded device outputs, and the frozen case generators those recordings use.

A recording stores the device's output bits for cases described here (shapes, flags, a seed);
the inputs are regenerated from the description on any machine. Editing a generator would
silently change what the recorded bits belong to, so each recording also stores a digest of
its inputs and the replay refuses a recording whose inputs no longer match ("recording and
generator disagree", not an emulator regression).
"""
