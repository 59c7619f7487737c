-- Reserved: number 003 belongs to another change of issue 9, developed on another branch.
-- tern needs the numbers without gaps, so this empty step stands in for it until that
-- change is merged; the merge replaces this file with that one (do not apply both).
SELECT 1;

---- create above / drop below ----

SELECT 1;
