"""The Pravega 2017 draft dialect (specs/pravega-draft-2017/README.md): connection-offset
appends in Begin/End blocks and Begin/Middle/End partial messages.  Its own
command table (:mod:`.frames`) and machines (:mod:`.connection`); it shares the
codec machinery, the segment store and the simulator with today's dialect."""
