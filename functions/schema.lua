-- Declarations of the hotspots app (functions/README.md): the indexes its queries use and the class-level
-- permissions that keep clients away from server-maintained rows. Applied, idempotently, when a
-- generation of functions loads.

-- Post: the author's posts (myPosts, stats, cascades), expiry (timeline filters, cleanup job),
-- newest and trending orders; full-text search on the text (searchPosts).
cloud.index("Post", {"author"})
cloud.index("Post", {"expiresAt"})
cloud.index("Post", {"likesCount"})
cloud.textIndex("Post", {"text"})

-- Comment: a post's comments oldest first (comments), a user's comments (stats, myData, cascades).
cloud.index("Comment", {"post"})
cloud.index("Comment", {"author"})

-- Reaction and View: one per (post, user), enforced by the database; per-user lookups for
-- myData, stats and the account cascade.
cloud.index("Reaction", {"post", "user"}, {unique = true})
cloud.index("Reaction", {"user"})
cloud.index("View", {"post", "user"}, {unique = true})
cloud.index("View", {"user"})

-- Posts and comments are written by signed-in users only (anonymous -> 119); ACLs and the
-- beforeSave triggers decide the rest.
cloud.classPermissions("Post", {create = {requiresAuthentication = true}})
cloud.classPermissions("Comment", {create = {requiresAuthentication = true}})

-- Reactions and views are created, changed and deleted only by Cloud Code (react, viewPost,
-- cascades) or the master key: an empty map allows nobody else. Reads stay public.
cloud.classPermissions("Reaction", {create = {}, update = {}, delete = {}})
cloud.classPermissions("View", {create = {}, update = {}, delete = {}})
