-- Reserved for the events branch (issue 35), which brings the real 009; a placeholder so that
-- tern's numbering has no gap on this branch. At merge, events' 009 replaces this file.
SELECT 1;
