package main

import "github.com/fsouza/fake-gcs-server/fakestorage"

func fakestorageBucket(name string) fakestorage.CreateBucketOpts {
	return fakestorage.CreateBucketOpts{Name: name}
}
