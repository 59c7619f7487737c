// Package shop is the product's vocabulary: the words the API, the saga, the activities
// and the stores share. It holds data types (cart lines, items, shortages, statuses, payments,
// the checkout view, catalog and checkout records), the ids and their one validation rule,
// and the names of the application error types the saga raises and the API maps.
//
// It is a leaf: it imports only the standard library and holds no behaviour beyond small pure
// functions on its own types, so any package may import it and it never pulls a database,
// Redis or Temporal client into its importers. Modelled on temporalio/background-checks'
// types package. It is named for the domain, so call sites read shop.View, shop.Item,
// shop.ErrTypeOutOfStock; not "checkout", which names the saga's own state type, the binary
// and many locals, and not "types", which says nothing.
package shop
